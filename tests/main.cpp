// doctest entry point for hla_tests; ctest runs each test case on its own.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
