// SPDX-License-Identifier: Apache-2.0
// The one place that gives nf_tables expressions a meaning: a rule's expressions, as the
// kernel holds them, decoded into the values it computes and the statements that use them
// (model.h), as nft's netlink_delinearize.c does. It keeps the register file's contents
// byte by byte, so a statement reads values, not registers; it decodes iptables-nft's
// xtables structs (addrtype, mark, the NAT targets' ranges, MARK) into the same
// statements as native expressions where they mean the same.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "ip-masq-agent/nft/codec/model.h"

namespace ipmasq::nft {

// The kernel allows 128 expressions per rule; beyond this many the rest is undecodable.
inline constexpr size_t kMaxExpressionsPerRule = 256;

// Decodes one rule of `table`, whose sets (read before its rules) give how many bytes a
// look-up reads and a map writes. Any input decodes: what has no meaning becomes an Other
// statement that may decide anything, and decoding stops there.
Rule decodeRule(const Table &table, uint64_t handle, std::span<const Expression> expressions,
		std::string comment = {});

// iptables' comment match, as every rule that has one holds it (shared: it costs nothing
// per rule).
Other commentMatch();

} // namespace ipmasq::nft
