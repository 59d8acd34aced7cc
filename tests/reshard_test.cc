// Loading into other shardings (filled in below).
#include <gtest/gtest.h>
