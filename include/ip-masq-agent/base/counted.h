// SPDX-License-Identifier: Apache-2.0
// "1 range", "2 ranges": a count and its noun, for messages a person reads.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace ipmasq {

// `noun` is the singular; the plural adds an "s" (every noun the messages count does).
inline std::string counted(size_t count, std::string_view noun)
{
	return fmt::format("{} {}{}", count, noun, count == 1 ? "" : "s");
}

} // namespace ipmasq
