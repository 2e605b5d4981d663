// SPDX-License-Identifier: Apache-2.0
// --explain: why a destination is (not) masqueraded, from the desired state, this host and the
// kernel.
//
// Each decision is the compiled desired ruleset's (its sets and SNAT statements, as the
// daemon would apply them here), named by the config's entries behind it; the live check
// compares the kernel's table with it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/diagnose/evaluator.h"
#include "ip-masq-agent/nft/codec/model.h"
#include "ip-masq-agent/config/policy.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"
#include "ip-masq-agent/model/sampled_packet.h"

namespace ipmasq {

// What the kernel holds, to compare with.
struct KernelView {
	enum class State {
		sets,         // the table exists: `sets` holds its address sets
		tableAbsent,  // no such table
		noPermission, // EPERM, and the process lacks CAP_NET_ADMIN: could not look
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
		noPermission, // EPERM, and the process lacks CAP_NET_ADMIN: could not look
		unreadable,   // another error: `problem` says which
	};
	State state = State::notRead;
	nft::NatRuleset ruleset;
	nft::Table agent; // the agent's own, from the desired ruleset, walked like the others
	std::string problem;
	// Legacy iptables nat tables (/proc/net/ip_tables_names, ip6_tables_names), which
	// nothing here can read.
	bool legacyIpv4 = false;
	bool legacyIpv6 = false;
};

// Everything besides the config that shapes the lines.
struct ExplainContext {
	bool enableIpv6 = false;
	std::string table = kDefaultTableName;
	// This node's addresses, read once: what is local (fib daddr type local), and for the
	// other tables' fib and addrtype matches.
	NodeAddresses node;
	KernelView kernel;
	// --explain-source: each applies to the destinations of its family.
	std::vector<Address> sources;
	// --explain-interface: the interface the traffic leaves through; "" when not given.
	std::string outputInterface;
	// --explain-port: the protocol and destination port; nullopt: any.
	std::optional<PortProtocol> transport;
	// The agent's ruleset as the daemon would make it here (desiredFromConfig): every
	// decision a line reports is read from it (one derivation of each decision), the config only names
	// the entries behind it.
	Ruleset desired;
	OtherTablesView otherTables;
};

// One line per destination, in order: "ADDRESS: VERDICT: REASON[; ...]", where VERDICT is
// "masqueraded", "SNAT to ADDRESS (outputAddress, FILE:LINE)" or "not masqueraded", for the
// given interface and (when one of its family is given) source (docs/configuration.md,
// "--explain").
std::vector<std::string> explainDestinations(const Config &config, const ExplainContext &context,
					     const std::vector<Address> &destinations);

// The address sets of inet `table` through the netlink backend, or why they could not be read.
KernelView readKernelView(const std::string &table);

// Every other table's nat postrouting chains (nft/codec/table_reader.h; the agent's table left
// out and taken from `desired` instead) and legacy iptables nat tables, or why they could
// not be read.
OtherTablesView readOtherTablesView(const Ruleset &desired);

} // namespace ipmasq
