// Text encodings the X services meet (X STRING is Latin-1); UTF-8 checks and Latin-1 to UTF-8
// are in common/utf8.hpp.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace deskbox::services::text {

// UTF-8 -> ISO 8859-1 (the X STRING encoding). Characters outside Latin-1 become '?'.
std::string utf8_to_latin1(std::string_view utf8);

}  // namespace deskbox::services::text
