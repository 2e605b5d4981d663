// SPDX-License-Identifier: Apache-2.0
// --explain: why a destination is (not) masqueraded, from the config, this host and the kernel.
//
// The decision is made here by a plain scan over the config's entries, independently of
// the interval sets the ruleset is built from, so that each checks the other: the live
// check compares this answer with the kernel's set.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/cidr.h"
#include "ip-masq-agent/config.h"
#include "ip-masq-agent/error.h"
#include "ip-masq-agent/nat_ruleset.h"
#include "ip-masq-agent/nat_evaluator.h"
#include "ip-masq-agent/ruleset.h"
#include "ip-masq-agent/ruleset_mapping.h"

namespace ipmasq {

// One entry that takes part in the destination decision.
struct ExplainEntry {
	enum class Kind {
		nonMasquerade, // nonMasqueradeCIDRs, or a built-in default when none is given
		linkLocal,     // 169.254.0.0/16 or fe80::/10, unless masqLinkLocal(IPv6)
		masquerade,    // masqueradeCIDRs
	};
	Kind kind;
	Prefix prefix;
};

// The longest prefix covering a destination decides; a masqueradeCIDRs entry wins a tie
// (only a built-in entry can tie with one: the same prefix in both lists is refused).
struct ExplainDecision {
	bool masqueraded = true;
	std::optional<ExplainEntry> decidedBy; // nullopt: no entry covers it (masqueraded)
	// The most specific entry of the other verdict that also covers it, if any.
	std::optional<ExplainEntry> overrides;
};

// The decision of the config alone (no local-address or source check), for one address
// of a family the agent handles. Deliberately its own scan, apart from policy.h's sweep
// that builds the kernel's sets, so that the live check compares two derivations.
ExplainDecision explainDecision(const Config &config, const Address &destination);

// An entry in --explain's words: "nonMasqueradeCIDRs 198.18.0.0/15 (FILE:LINE)",
// "built-in default 10.0.0.0/8", "link-local 169.254.0.0/16", "masqueradeCIDRs ...".
std::string describeEntry(const Config &config, const ExplainEntry &entry);

// The entry that decides, described, or "no entry covers it" (masqueraded).
std::string describeDecidingEntry(const Config &config, const ExplainDecision &decision);

// What the kernel holds, to compare with.
struct KernelView {
	enum class State {
		sets,         // the table exists: `sets` holds its address sets
		tableAbsent,  // no such table
		noPermission, // no CAP_NET_ADMIN (EPERM): could not look
		unreadable,   // another error: `problem` says which
	};
	State state = State::unreadable;
	std::vector<AddressSet> sets;
	std::string problem;
	std::vector<KernelSnatRule> snatRules = {}; // the SNAT rules' targets
};

// Other tables' NAT, for the node-wide clause: what the whole node does with the packet.
struct OtherTablesView {
	enum class State {
		notRead,      // not asked for: no clause
		read,         // `ruleset` holds every other table's nat postrouting chains
		noPermission, // no CAP_NET_ADMIN (EPERM): could not look
		unreadable,   // another error: `problem` says which
	};
	State state = State::notRead;
	nat::NatRuleset ruleset;
	nat::NodeAddresses node; // for fib and addrtype
	std::string problem;
	int32_t agentPriority = kDefaultPriority;
	// Legacy iptables nat tables (/proc/net/ip_tables_names, ip6_tables_names), which
	// nothing here can read.
	bool legacyIpv4 = false;
	bool legacyIpv6 = false;
};

// Everything besides the config that shapes the lines.
struct ExplainContext {
	bool enableIpv6 = false;
	std::string table = kDefaultTableName;
	// This host's local addresses (fib daddr type local), as prefixes: an address of an
	// interface is a /32 or /128; an IPv4 loopback network counts whole (127.0.0.0/8).
	std::vector<Prefix> localPrefixes;
	KernelView kernel;
	// --explain-source: each applies to the destinations of its family.
	std::vector<Address> sources;
	// --explain-interface: the interface the traffic leaves through; "" when not given.
	std::string outputInterface;
	// This node's addresses in outputAddress subnets, as the daemon would choose them.
	SubnetAddresses subnet;
	OtherTablesView otherTables;
};

// One line per destination, in order: "ADDRESS: VERDICT: REASON[; ...]", where VERDICT is
// "masqueraded", "SNAT to ADDRESS (outputAddress, FILE:LINE)" or "not masqueraded", for the
// given interface and (when one of its family is given) source (docs/configuration.md,
// "--explain").
std::vector<std::string> explainDestinations(const Config &config, const ExplainContext &context,
					     const std::vector<Address> &destinations);

// This host's local addresses, from getifaddrs (see ExplainContext::localPrefixes).
Result<std::vector<Prefix>> readLocalPrefixes();

// The address sets of inet `table` through the netlink backend, or why they could not be read.
KernelView readKernelView(const std::string &table);

// Every other table's nat postrouting chains (netlink/nat_reader.h; the agent's inet
// `table` left out), this node's addresses and legacy iptables nat tables, or why they
// could not be read.
OtherTablesView readOtherTablesView(const std::string &table, int32_t agentPriority);

} // namespace ipmasq
