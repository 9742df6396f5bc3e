// The fixture is header-only; this translation unit keeps the support library non-empty.
#include "tests/support/xvfb.hpp"
