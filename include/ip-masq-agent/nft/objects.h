// SPDX-License-Identifier: Apache-2.0
// The desired ruleset as libnftnl objects, each with a description of the model object.
//
// This (with its sets and elements, set_encoding.h) is the one place that decides the
// bytecode. The batch serializes these objects and the backend's matches() compares them
// with what the kernel dumps, so what we send and what we expect to find can never
// drift apart.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/netlink/handles.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/netlink/nftnl_parse.h"

namespace ipmasq::netlink {

class Socket; // socket.h

// nft's datatype ids of the address sets' keys, which it stores in the kernel (and reads
// back to list them): ipv4_addr and ipv6_addr.
inline constexpr uint32_t kTypeIpv4Address = 7;
inline constexpr uint32_t kTypeIpv6Address = 8;
// ... and of interface names (ifname).
inline constexpr uint32_t kTypeInterfaceName = 41;

// Each NEWSETELEM message stays below this size. The element list is one netlink nest,
// whose length field is 16 bits: nft fills messages up to that limit, we keep well
// under it so that no estimate can ever overflow it.
inline constexpr size_t kElementMessageBudget = 16 * 1024;

// One set element as nft sends it, as plain bytes: a large set has hundreds of
// thousands of them, and libnftnl's element objects take about 300 bytes each.
struct ElementSpec {
	std::array<uint8_t, 16> key{}; // network byte order; the first keyLen bytes count
	uint8_t keyLen = 0;
	bool intervalEnd = false; // NFT_SET_ELEM_INTERVAL_END: the first address after a range
	bool openInterval = false; // the range runs to the last address: no end element
};

// Some of one set's elements: what one NEWSETELEM message carries.
struct ElementChunk {
	std::string table;
	std::string set; // the set's name ("__set%d" for an anonymous set of the batch)
	uint32_t setId = 0;
	std::vector<ElementSpec> elements;
	std::string description; // "elements of set nomasq-v4 (ranges 1-315 of 1200)"

	// The libnftnl object that carries these elements (table, set name and id, one
	// element each). Built when a message is serialized or compared, one chunk at a
	// time: building a whole set at once would take 60 MB for 100,000 ranges.
	SetPtr build() const;
};

struct EncodedSet {
	SetPtr set; // the declaration: NEWSET
	std::string description; // "set nomasq-v4"
	std::vector<ElementChunk> elements;
};

struct EncodedRule {
	// Anonymous sets the rule looks up ("{ tcp, udp, sctp }"): nft declares each one
	// right before the rule that binds it.
	std::vector<EncodedSet> anonymousSets;
	RulePtr rule;
	// As `nft list` prints it, without its comment: "ip daddr @nomasq-v4 return".
	std::string text;
	std::string description; // "rule in chain IP-MASQ-AGENT: " and the text
};

struct EncodedChain {
	ChainPtr chain;
	std::string description; // "chain postrouting"
	std::vector<EncodedRule> rules;
};

struct EncodedObject {
	ObjPtr object; // a named counter, with its comment and starting values
	std::string description; // "counter masq-v4"
};

struct EncodedTable {
	TablePtr table; // with its comment
	std::string description; // "table ip-masq-agent"
	std::vector<EncodedObject> objects;
	std::vector<EncodedSet> sets;
	std::vector<EncodedChain> chains;
};

// A table handle carrying only family inet and the name (DELTABLE, GETTABLE), or
// also flags 0 as nft sends for "add table" (NEWTABLE that creates it if missing).
TablePtr tableHandle(const std::string &name, bool withFlags);

// NF_NAT_RANGE_PROTO_RANDOM_FULLY (linux/netfilter/nf_nat.h, which clashes with the C
// library's netinet/in.h in a header; objects.cpp checks that they agree).
inline constexpr uint32_t kNatFlagFullyRandom = 0x10;

// How the encoding adapts to the kernel (the backend decides, backend_features.cpp).
struct EncodingOptions {
	// The NAT flag bit that asks for fully-random source ports: the kernel's, or (a
	// fault hook for tests) a bit no kernel knows, which it refuses as one that
	// predates fully-random does.
	uint32_t fullyRandomFlag = kNatFlagFullyRandom;
};

// Encode the whole model. Fails only on what the kernel or nft would refuse anyway
// and the model does not check: over-long comments.
Result<EncodedTable> encodeRuleset(const Ruleset &ruleset, const EncodingOptions &options = {});

// Sets the values the named counters of `table` start at when the batch creates them (by
// name; the others start at zero, as encodeRuleset() leaves them). Cheap: the backend sets
// them last, from values read as late as it can before the commit.
void startCountersAt(EncodedTable &table, const std::vector<CounterValue> &values);

} // namespace ipmasq::netlink
