// Writing bytes into a buffer that NCCL's LL and LL128 receivers poll while the bytes land: each
// 8-byte LL word carries its data before its flag, each 128-byte LL128 line its flag in its last 8
// bytes, and a reader that sees a flag must find the data before it there.
#pragma once

#include <cstddef>

namespace zipccl::tcp {

constexpr size_t kLine = 128;  // an LL128 line

// The first n bytes of src into dst (both 128-byte aligned to the message) as recv() writes them:
// ascending, each line's last 8 bytes after the rest of it. n may end anywhere, a line's or a
// word's rest following later (recv() into dst + n): whole words are copied with memcpy, whose
// overlapping stores may land a word's later bytes (an LL flag) before its earlier ones where a
// copy ends inside a word, and a last partial word byte by byte.
void copy_lines_in_order(char* dst, const char* src, size_t n);

}  // namespace zipccl::tcp
