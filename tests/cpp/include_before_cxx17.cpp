// Compiled by `make test-cpp-std` with -std=c++14 and -std=c++11, where it
// must fail with exactly one error: wspool.hpp's own line saying it needs
// C++17 (issue 38: it used to give 81 errors from the code below C++17).
#include <wspool.hpp>

int main() { return 0; }
