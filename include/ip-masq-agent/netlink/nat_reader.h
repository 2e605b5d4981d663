// SPDX-License-Identifier: Apache-2.0
// Reads other tables' NAT from the kernel into the NAT evaluator's model: the tables of
// families ip, ip6 and inet that have a nat postrouting base chain, the chains those reach
// and the sets they look up. Read-only: it sends dump requests and nothing else.
#pragma once

#include <cstddef>
#include <string>

#include "ip-masq-agent/error.h"
#include "ip-masq-agent/nat_ruleset.h"
#include "ip-masq-agent/netlink/socket.h"

namespace ipmasq::netlink {

// What one read may hold. Beyond the table, chain or rule limits the read fails (E2BIG)
// with a message that names the limit; beyond the element limit the sets that did not fit
// are kept without elements (Set::complete false), which the evaluator treats as "may".
struct NatReadLimits {
	size_t maxTables = 1000; // of any family, as the kernel lists them
	size_t maxChains = 100000; // of the families read, in every table
	size_t maxRules = 200000; // in the chains read
	size_t maxSets = 10000; // in the tables read
	size_t maxElements = 1000000; // over all sets read
	size_t maxExpressionsPerRule = 256; // the kernel allows 128
	int attempts = 3; // reads interrupted by other commits before giving up (EAGAIN)
	// An inet table left unread: the agent's own, which the evaluator places from the
	// agent's decision (AgentPlacement) and whose sets may hold 100,000 elements.
	std::string skipInetTable;
};

// Dumps what the NAT evaluator needs, consistently: the ruleset generation is read before
// and after, and a read that a commit interrupted or overlapped is done again. Needs
// CAP_NET_ADMIN (EPERM otherwise, with a hint).
Result<nat::NatRuleset> readNatRuleset(Socket &socket, const NatReadLimits &limits = {});

// Legacy iptables (x_tables) keeps its tables out of nf_tables, where nothing here sees
// them; /proc/net/ip_tables_names and ip6_tables_names list the ones that exist in this
// network namespace.
struct LegacyNat {
	bool ipv4 = false; // an ip_tables nat table exists
	bool ipv6 = false; // an ip6_tables nat table exists
};

// `procNet` is /proc/net (a test may point elsewhere). A missing file means that the
// module is not loaded: no legacy tables.
Result<LegacyNat> legacyNatTables(const std::string &procNet = "/proc/net");

} // namespace ipmasq::netlink
