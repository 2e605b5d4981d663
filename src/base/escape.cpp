// SPDX-License-Identifier: Apache-2.0
// Escaping of untrusted text for logs and errors: one printable line, always.
#include "ip-masq-agent/base/escape.h"

#include <fmt/format.h>

namespace ipmasq {

std::string escaped(std::string_view text)
{
	std::string out;
	out.reserve(text.size());
	for (const char c : text) {
		const auto byte = static_cast<unsigned char>(c);
		switch (c) {
		case '\\': out += "\\\\"; break;
		case '"': out += "\\\""; break;
		case '\n': out += "\\n"; break;
		case '\r': out += "\\r"; break;
		case '\t': out += "\\t"; break;
		default:
			if (byte < 0x20 || byte >= 0x7f)
				out += fmt::format("\\x{:02x}", byte);
			else
				out += c;
		}
	}
	return out;
}

std::string quoted(std::string_view text)
{
	return '"' + escaped(text) + '"';
}

std::string quotedShort(std::string_view text, size_t shownBytes)
{
	if (text.size() <= shownBytes)
		return quoted(text);
	return fmt::format("{}... ({} bytes)", quoted(text.substr(0, shownBytes)), text.size());
}

} // namespace ipmasq
