#!/bin/sh
# The NCCL drop-in exports every function NCCL 2.28's nccl.h declares: a C
# file that includes NCCL's own header and takes the address of each of
# them (the names come from the header itself) links into a shared object
# with --no-undefined against shim/libnccl.so.2, and a program built the
# same way runs and reads ncclGetVersion through the drop-in.  Skips (77)
# where nccl.h is not installed (NCCL_H, or /usr/local/cuda/include).
set -u
builddir=${builddir:-.}
nccl_h=${NCCL_H:-/usr/local/cuda/include/nccl.h}
[ -r "$nccl_h" ] || { echo "SKIP: no nccl.h at $nccl_h"; exit 77; }
shimdir="$builddir/shim/.libs"
[ -e "$shimdir/libnccl.so.2" ] || { echo "FAIL: $shimdir/libnccl.so.2 was not built"; exit 1; }
cc="${CC:-cc} ${CFLAGS:-} ${LDFLAGS:-}"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# every ncclX( and pncclX( declared at the start of a line of the header
names=$(sed -n 's/^[A-Za-z_][A-Za-z_ ]*[ *]\(p\{0,1\}nccl[A-Za-z0-9_]*\)(.*/\1/p' "$nccl_h" | sort -u)
count=$(echo "$names" | wc -w)
[ "$count" -ge 40 ] || { echo "FAIL: found only $count functions in $nccl_h"; exit 1; }
{
  echo "#include <stdio.h>"
  echo "#include \"$nccl_h\""
  echo "void* nccl_abi_table[] = {"
  for n in $names; do echo "  (void*)&$n,"; done
  echo "};"
  echo "int nccl_abi_count = $count;"
} > "$tmp/abi.c"
if ! $cc -shared -fPIC -I"$(dirname "$nccl_h")" -o "$tmp/libabi.so" "$tmp/abi.c" \
     -L"$shimdir" -l:libnccl.so.2 -Wl,--no-undefined 2> "$tmp/err"; then
  echo "FAIL: linking every nccl.h function against the drop-in:"; cat "$tmp/err"; exit 1
fi
cat > "$tmp/main.c" <<EOC
#include <stdio.h>
#include "$nccl_h"
extern int nccl_abi_count;
int main(void) {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess || v != NCCL_VERSION_CODE) {
    printf("ncclGetVersion through the drop-in: %d, header %d\n", v, NCCL_VERSION_CODE);
    return 1;
  }
  printf("%d nccl.h functions resolved; ncclGetVersion %d\n", nccl_abi_count, v);
  return 0;
}
EOC
$cc -I"$(dirname "$nccl_h")" -o "$tmp/main" "$tmp/main.c" -L"$tmp" -labi -L"$shimdir" \
    -l:libnccl.so.2 -Wl,-rpath,"$tmp" -Wl,-rpath,"$(cd "$shimdir" && pwd)" || exit 1
LD_LIBRARY_PATH="$builddir/.libs:${LD_LIBRARY_PATH:-}" "$tmp/main"
