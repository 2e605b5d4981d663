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

#include "ip-masq-agent/other_tables/model.h"

namespace ipmasq::nat {

// The kernel allows 128 expressions per rule; beyond this many the rest is undecodable.
inline constexpr size_t kMaxExpressionsPerRule = 256;

// A meta or ct key (NFT_META_*, NFT_CT_*) as nft names it, and how many bytes a load of
// it writes. A key the table does not know has no name and fills a whole register.
struct LoadKey {
	const char *name; // nullptr: not known here
	uint32_t len;
};
LoadKey metaKey(uint32_t key);
LoadKey ctKey(uint32_t key);

// Decodes one rule of `table`, whose sets (read before its rules) give how many bytes a
// look-up reads and a map writes. Any input decodes: what has no meaning becomes an
// Undecodable statement, and decoding stops there.
Rule decodeRule(const Table &table, uint64_t handle, std::span<const Expression> expressions,
		std::string comment = {});

} // namespace ipmasq::nat
