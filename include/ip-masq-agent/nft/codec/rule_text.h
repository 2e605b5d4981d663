// SPDX-License-Identifier: Apache-2.0
// A decoded rule as `nft list ruleset` (nft 1.0.6, with xtables support) prints it, so that
// an operator can paste it into nft and get the same rule. The rule is rebuilt as nft's
// netlink_delinearize.c rebuilds it (the registers' expressions, then its protocol context,
// payload dependencies, masks and prefixes, flags and ranges) and printed with nft's
// vocabulary (vocabulary.h). A part it cannot print as nft does is printed as
// `[unknown: WHAT]`, which no nft reads as another rule; docs/design.md ("Rules as text")
// lists those parts.
#pragma once

#include <string>

#include "ip-masq-agent/nft/codec/model.h"

namespace ipmasq::nft {

// `ip daddr != 10.0.0.0/8 fib daddr type != local counter packets 0 bytes 0 masquerade`.
std::string ruleText(const Table &table, const Rule &rule);

// The marker of a part that is not printed as nft prints it.
inline constexpr const char *kUnknownMarker = "[unknown: ";

} // namespace ipmasq::nft
