#!/bin/sh
# zipccl-inspect on what is not a tensor file: a directory, a FIFO (must not block), an empty
# file, a text file; each refused by name with exit 1, and the summary never says bit-exact.
# usage: inspect_cli_test.sh PATH_TO_ZIPCCL_INSPECT
set -u
bin=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
mkfifo "$dir/fifo"
: > "$dir/empty.bin"
printf 'hello, these are words\nnot tensors\n' > "$dir/notes.txt"
head -c 4096 /dev/urandom > "$dir/ok.bin"
fail=0
check() {  # expect-in-stderr args...
  want=$1
  shift
  out=$("$bin" "$@" 2>"$dir/err")
  rc=$?
  if [ $rc -ne 1 ]; then echo "FAIL: $* exited $rc, not 1"; fail=1; fi
  if ! grep -q "$want" "$dir/err"; then echo "FAIL: $*: stderr lacks '$want':"; cat "$dir/err"; fail=1; fi
  # The summary (the text's last line, the JSON's last total) never claims bit-exact.
  if echo "$out" | tail -1 | grep -q 'bit-exact\|"bit_exact":true}}$'; then echo "FAIL: $*: claims bit-exact: $out"; fail=1; fi
}
check "is a directory" "$dir"
check "not a regular file" "$dir/fifo"
check "empty file" "$dir/empty.bin"
check "looks like text" "$dir/notes.txt"
check "is a directory" "$dir/ok.bin" "$dir"            # one good file does not hide a bad one
check "is a directory" --json "$dir/ok.bin" "$dir"
"$bin" --json "$dir/ok.bin" "$dir" 2>/dev/null | grep -q '"unread_files":1' || { echo "FAIL: --json lacks unread_files"; fail=1; }
# A text file is read when the user says what it holds.
"$bin" --dtype bf16 "$dir/notes.txt" >/dev/null 2>&1 || { echo "FAIL: --dtype bf16 on a text file refused"; fail=1; }
[ $fail -eq 0 ] && echo "PASS: every non-tensor input refused by name"
exit $fail
