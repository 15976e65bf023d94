// The symbol every translation unit that includes coverbs' headers references (coverbs/config.hpp): it
// names the Asio backend this library was built with, so a program built for the other one fails to link.
#include <coverbs/config.hpp>

extern "C" const int COVERBS_ASIO_BACKEND_SYMBOL = 1;
