// SPDX-License-Identifier: Apache-2.0
// Go duration strings ("60s", "1m30s", "1.5h", "300ms"), as upstream's resyncInterval uses.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "ip-masq-agent/base/error.h"

namespace ipmasq {

using Duration = std::chrono::nanoseconds;

// Parse with Go's time.ParseDuration grammar: an optional sign, then one or more
// decimal numbers each with a unit (ns, us, µs, μs, ms, s, m, h). "0" alone is zero.
Result<Duration> parseGoDuration(std::string_view text);

// Format as Go's Duration.String() does ("1m30s", "1.5s", "300ms", "0s").
std::string formatGoDuration(Duration duration);

} // namespace ipmasq
