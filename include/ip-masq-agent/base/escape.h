// SPDX-License-Identifier: Apache-2.0
// Escaping of untrusted text (config values, flag values, file names) for logs and errors.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace ipmasq {

// `text` in double quotes, with backslash, quote and every control or non-ASCII byte
// escaped (\n, \t, \", \\, \xNN), so that no config or flag value can end a log line,
// forge another one, or smuggle terminal escape sequences into an operator's screen.
// Use it for every value that came from outside when it goes into a message.
std::string quoted(std::string_view text);
// The same for a std::string (and a literal): an exact match, so that a call found by argument-dependent
// lookup never picks std::quoted (which escapes nothing) where <iomanip> is included.
inline std::string quoted(const std::string &text) { return quoted(std::string_view(text)); }
inline std::string quoted(const char *text) { return quoted(std::string_view(text)); }

// quoted(), cut after `shownBytes` bytes with the length said: "\"abc\"... (812 bytes)". For
// values that may be long (a whole line of a file, a hostile config value).
std::string quotedShort(std::string_view text, size_t shownBytes = 64);

// The same escaping without the quotes, for text that is already delimited.
std::string escaped(std::string_view text);

} // namespace ipmasq
