// Text encodings the X services meet (X STRING is Latin-1); UTF-8 checks are in common/utf8.hpp.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace deskbox::services::text {

// ISO 8859-1 (the X STRING encoding) <-> UTF-8. Characters outside Latin-1 become '?'.
std::string latin1_to_utf8(std::string_view latin1);
std::string utf8_to_latin1(std::string_view utf8);

}  // namespace deskbox::services::text
