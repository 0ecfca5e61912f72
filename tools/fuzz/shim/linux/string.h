/* User-space stand-in for <linux/string.h>. */
#include <string.h>
