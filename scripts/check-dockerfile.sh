#!/usr/bin/env bash
# Runs docker/Dockerfile's steps on this host, for machines without Docker (a Debian or Ubuntu
# host with CUDA and NCCL under /usr/local/cuda, as the CI machines): every RUN of both stages in
# order, with the image's paths mapped to a scratch folder (/src/zipccl: a copy of the tracked
# files, /build, /opt/zipccl), ARG defaults and ENV applied, and apt-get installing the
# packages this host's repositories have (NVIDIA's libnccl2/libnccl-dev are not in Debian's:
# NCCL comes from /usr/local/cuda here). Base images and COPY --from cannot be checked.
#   scripts/check-dockerfile.sh [docker/Dockerfile]      (~10 minutes on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
DOCKERFILE=${1:-docker/Dockerfile}
SCRATCH=$(mktemp -d /tmp/zipccl-docker.XXXXXX)
trap 'rm -rf "$SCRATCH"' EXIT
mkdir -p "$SCRATCH/src/zipccl" "$SCRATCH/opt"
git ls-files -z | xargs -0 tar -cf - | tar -xf - -C "$SCRATCH/src/zipccl"

# One line per step: RUN, workdir, env assignments, command, separated by 0x1f.
python3 - "$DOCKERFILE" "$SCRATCH" >"$SCRATCH/steps" <<'PY'
import re, shlex, sys
path, scratch = sys.argv[1], sys.argv[2]
text = open(path).read().replace("\\\n", " ")
lines = [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")]
args, env, workdir = {}, {}, "/"
def subst(s):
    s = re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m[1] or m[2], env.get(m[1] or m[2], m[0])), s)
    for p in ("/src/zipccl", "/build", "/opt/zipccl"):
        s = s.replace(p, scratch + p)
    return s
for l in lines:
    op, _, rest = l.partition(" ")
    op = op.upper()
    if op == "ARG":
        k, _, v = rest.partition("=")
        args.setdefault(k.strip(), v.strip().strip('"'))
    elif op == "FROM":
        env, workdir = {}, "/"
    elif op == "WORKDIR":
        workdir = subst(rest.strip())
    elif op == "ENV":
        for kv in shlex.split(rest):
            k, _, v = kv.partition("=")
            env[k] = subst(v).replace("${PATH}", "").replace("${LD_LIBRARY_PATH}", "")
    elif op == "RUN":
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        print("\x1f".join(["RUN", workdir, exports, subst(rest)]))
PY

apt-get update -q >/dev/null  # apt-cache must know this host's repositories
n=0
# Fields split on the unit separator: a tab is IFS whitespace, and empty fields would vanish.
while IFS=$'\x1f' read -r kind workdir exports cmd; do
  n=$((n + 1))
  echo "== step $n (in $workdir): ${cmd:0:150}"
  if [[ $cmd == apt-get\ update* ]]; then
    # Install what this host's repositories have; say what they lack.
    pkgs=$(sed -E 's/.*install[^a-z]*(-y|--no-install-recommends| )*//; s/&&.*//' <<<"$cmd")
    have=() lack=()
    for p in $pkgs; do
      [[ $p == -* ]] && continue
      if apt-cache show "$p" >/dev/null 2>&1; then have+=("$p"); else lack+=("$p"); fi
    done
    [[ ${#lack[@]} -gt 0 ]] && echo "   not in this host's repositories (from the image's): ${lack[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${have[@]}" >/dev/null
    echo "   installed or present: ${have[*]}"
    continue
  fi
  (
    mkdir -p "$workdir" && cd "$workdir"
    # shellcheck disable=SC2086
    [[ -n $exports ]] && export $exports PATH="$SCRATCH/opt/zipccl/bin:$PATH" \
      LD_LIBRARY_PATH="$SCRATCH/opt/zipccl/lib:${LD_LIBRARY_PATH:-}"
    bash -euo pipefail -c "$cmd"
  ) >"$SCRATCH/step$n.log" 2>&1 || { tail -40 "$SCRATCH/step$n.log"; echo "check-dockerfile: step $n FAILED"; exit 1; }
  tail -3 "$SCRATCH/step$n.log"
done <"$SCRATCH/steps"
echo "check-dockerfile: all $n steps of $DOCKERFILE passed on this host"
