// Prints the offset and size of every member of our ABI structs and the value of every constant,
// built either against plugin/nccl_abi.h or (ZIP_ABI_NCCL) against NCCL's own headers: the two
// outputs must be identical.
#include <cstddef>
#include <cstdio>

#ifdef ZIP_ABI_NCCL
#include "nccl.h"
#include "plugin/nccl_net.h"
#define X(ours, nccl, m) std::printf(#ours "." #m " %zu %zu\n", offsetof(nccl, m), sizeof(((nccl*)nullptr)->m));
#else
#include "nccl_abi.h"
#define X(ours, nccl, m) std::printf(#ours "." #m " %zu %zu\n", offsetof(ours, m), sizeof(((ours*)nullptr)->m));
#endif
#define C(name) std::printf(#name " %ld\n", long(name));

int main() {
#include "abi_fields.h"
  return 0;
}
