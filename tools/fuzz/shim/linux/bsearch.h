/* User-space stand-in: libc's bsearch has the kernel's argument order. */
#include <stdlib.h>
