// SPDX-License-Identifier: Apache-2.0
// The desired ruleset: the agent's whole nftables table as plain data.
//
// This is the one model both consumers read: the dry-run renderer (nft_text.h) prints it
// and the netlink backend (netlink/) encodes it. ruleset_mapping.h builds it from the
// config (and back from the kernel's sets); this header knows nothing of the config.
// Rules are a closed set of domain statements rather than free-form expressions, so each
// consumer handles every kind exhaustively (std::visit) and both emit the bytecode `nft`
// itself would.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/base/overloaded.h"
#include "ip-masq-agent/model/port_ranges.h"

namespace ipmasq {

inline constexpr const char *kDefaultTableName = "ip-masq-agent";
inline constexpr const char *kDefaultMasqChain = "IP-MASQ-AGENT";
inline constexpr const char *kBaseChainName = "postrouting";
inline constexpr const char *kSetNameV4 = "nomasq-v4";
inline constexpr const char *kSetNameV6 = "nomasq-v6";
// The sources masqueraded, per family, only when masqueradeSourceCIDRs lists that family.
inline constexpr const char *kSourceSetNameV4 = "masq-src-v4";
inline constexpr const char *kSourceSetNameV6 = "masq-src-v6";
// The output interfaces the agent considers (outputInterface), and those it never
// source-NATs (nonMasqueradeInterfaces), each only when its key lists some.
inline constexpr const char *kOutputInterfaceSetName = "masq-ifaces";
inline constexpr const char *kNonMasqueradeInterfaceSetName = "nomasq-ifaces";

// The set of a family: non-masquerade destinations, or masqueraded sources.
inline const char *destinationSetName(Family family)
{
	return family == Family::ipv4 ? kSetNameV4 : kSetNameV6;
}
inline const char *sourceSetName(Family family)
{
	return family == Family::ipv4 ? kSourceSetNameV4 : kSourceSetNameV6;
}

// Netfilter's standard priority for source NAT (NF_IP_PRI_NAT_SRC).
inline constexpr int kSrcnatPriority = 100;
// After kube-proxy's nat-postrouting chain (at srcnat): kube-proxy's masquerade
// decisions for Service traffic come first, as its KUBE-POSTROUTING jump did in iptables.
inline constexpr int kDefaultPriority = kSrcnatPriority + 10;
// NAT base chains must run after conntrack (NF_IP_PRI_CONNTRACK = -200).
inline constexpr int kMinNatPriority = -199;
// The kernel carries a hook priority as a signed 32-bit number (NFTA_HOOK_PRIORITY).
inline constexpr int kMaxPriority = 2147483647;

// nf_tables names: NFT_NAME_MAXLEN (256) bytes including the terminating NUL.
inline constexpr size_t kMaxNameLength = 255;
// nft refuses longer comments (NFTNL_UDATA_COMMENT_MAXLEN in libnftnl/udata.h).
inline constexpr size_t kMaxNftCommentLength = 128;
// The one check of that limit: "the comment of <what> is N characters long; ...".
Status checkCommentLength(std::string_view what, const std::string &comment);

// Parse "110", "srcnat", "srcnat + 10", "srcnat+10", "filter - 5" (nft's names and
// syntax: the offset after + or - is a number without a sign). The result is within
// [kMinNatPriority, kMaxPriority]; an error states the bound that was crossed.
Result<int> parseChainPriority(std::string_view text);
// Print a postrouting priority as nft lists it: a name within +-10 of a standard one.
std::string formatChainPriority(int priority);

// Everything that shapes the ruleset besides the config file.
struct RulesetOptions {
	std::string table = kDefaultTableName;
	std::string masqChain = kDefaultMasqChain;
	int priority = kDefaultPriority;
	bool enableIpv6 = false;
	bool randomFully = true;
	std::vector<PortRange> toPorts;
	// Count new connections per decision in named counters (--connection-counters).
	bool connectionCounters = true;
};

// Table, chain and set names end up unquoted in nft syntax: keep them identifiers of
// 1 to kMaxNameLength characters that are not nft keywords.
Status validateName(std::string_view what, std::string_view name);

// An interval set: of addresses, destinations (nomasq-v4/-v6) or sources
// (masq-src-v4/-v6); or of output interface names (masq-ifaces, nomasq-ifaces), whose
// 16-byte keys egress.h holds as 128-bit values (elements of Family::ipv6's width), each
// name or wildcard a range of them.
struct AddressSet {
	std::string name;
	IntervalSet elements;
	std::string comment;
	bool interfaceNames = false;

	// The addresses' family (for an interface set: Family::ipv6, the keys' width).
	Family family() const { return elements.family(); }
	bool operator==(const AddressSet &) const = default;
};

// --- Statements: one per kind of rule the agent writes. ---

// [meta nfproto ipv4] fib daddr type != local jump <target>
// ip saddr @<sourceSet> fib daddr type != local jump <target>   (ip6 saddr for IPv6)
// Upstream's "-m addrtype ! --dst-type LOCAL -j IP-MASQ-AGENT" in POSTROUTING.
// oifname @<outputInterfaceSet> ... (outputInterface) in front of either.
struct JumpIfNotLocal {
	std::optional<Family> onlyFamily; // restrict to one family (IPv4 without --enable-ipv6)
	std::string target;
	// Set: only sources in this set of family `onlyFamily` (which must be set) jump
	// (masqueradeSourceCIDRs); the set match implies the family.
	std::string sourceSet;
	// Set: only traffic leaving through an interface of this set jumps (outputInterface).
	std::string outputInterfaceSet = {};
	bool operator==(const JumpIfNotLocal &) const = default;
};

// [meta nfproto <family>] oifname @<set> return (nonMasqueradeInterfaces)
struct ReturnIfOutputInterfaceInSet {
	std::string set;
	// Set: only this family's traffic (when a counter per family counts it).
	std::optional<Family> family = {};
	bool operator==(const ReturnIfOutputInterfaceInSet &) const = default;
};

// [oifname @<outputInterfaceSet>] ip saddr != @<sourceSet> fib daddr type != local
// (ip6 for IPv6): no verdict; it is there to count the connections that the base chain's
// jump left alone for their source (masqueradeSourceCIDRs), with a counter.
struct MatchUnlistedSource {
	Family family = Family::ipv4;
	std::string sourceSet;
	std::string outputInterfaceSet = {};
	bool operator==(const MatchUnlistedSource &) const = default;
};

// ip daddr @<set> return / ip6 daddr @<set> return
struct ReturnIfDestinationInSet {
	Family family;
	std::string set;
	bool operator==(const ReturnIfDestinationInSet &) const = default;
};

// Pick this rule for `below` out of every `modulus` flows: numgen random mod M < B.
// A cascade of these spreads flows over port ranges in proportion to their sizes.
struct RandomSample {
	uint32_t modulus;
	uint32_t below;
	bool operator==(const RandomSample &) const = default;
};

// [meta nfproto <family>] [meta l4proto { tcp, udp, sctp }] [numgen ...] masquerade
// [to :ports] [fully-random]
struct Masquerade {
	std::optional<PortRange> toPorts; // implies the l4proto match (ports need a transport)
	std::optional<RandomSample> sample;
	bool fullyRandom = true;
	// Set: only this family's traffic (when a counter per family counts it).
	std::optional<Family> onlyFamily = {};
	bool operator==(const Masquerade &) const = default;
};

// [meta l4proto { tcp, udp, sctp }] [numgen ...] snat ip|ip6 to <first>[-<last>][:ports]
// [fully-random] (outputAddress, outputAddressIPv6). In an inet chain it applies to its
// family only: a packet of the other family goes on to the next rule.
struct SourceNat {
	Family family = Family::ipv4;
	AddressRange to; // one address (first == last) or a range
	std::optional<PortRange> toPorts; // implies the l4proto match, as for Masquerade
	std::optional<RandomSample> sample;
	bool fullyRandom = true;
	// "meta nfproto <family>" first: a counter before the NAT would count the other
	// family too, which passes through it.
	bool matchFamily = false;
	bool operator==(const SourceNat &) const = default;
};

// The transport protocols --to-ports applies to, as upstream: tcp, udp, sctp.
inline constexpr uint8_t kPortProtocols[] = {6, 17, 132};
// Those the guard limits: every protocol with ports (tcp, udp, dccp, sctp, udplite), in
// the order nft lists them.
inline constexpr uint8_t kGuardedProtocols[] = {6, 17, 33, 132, 136};

// --- The SNAT guard (snatGuard) ---
// Its two limits, each per source address toward one destination (address, protocol, port).
enum class GuardLimitKind : uint8_t {
	newConnections,  // newConnectionsPerSecond: "limit rate over N/second burst N packets"
	openConnections, // openConnections: "ct count over N"
};
// "rate", "open": the sets' names and the metrics' `limit` label.
const char *guardLimitName(GuardLimitKind kind);

// The guard's sets of a family: the exempt sources (an interval AddressSet, always there
// with the section, so that an edit of `exempt` is an element update), the keys tracked per
// limit (guard-rate-v4, guard-open-v4) and those over it (guard-over-rate-v4, ...).
std::string guardExemptSetName(Family family);
std::string guardTrackSetName(GuardLimitKind kind, Family family);
std::string guardOverSetName(GuardLimitKind kind, Family family);

// [meta nfproto <family>] meta l4proto { tcp, udp, dccp, sctp, udplite } ip saddr != @<exemptSet>
// update @<trackSet> { ip saddr . ip daddr . meta l4proto . th dport limit rate over N/second burst N packets }
// update @<overSet> { ip saddr . ip daddr . meta l4proto . th dport } [drop]
// (add @<trackSet> { ... ct count over N } for openConnections; ip6 for IPv6). The first
// dynset is the match: the rule goes on only for a key over its limit, which the second
// records (with the over set's counter) and, when enforcing, drops.
struct GuardLimit {
	Family family = Family::ipv4;
	GuardLimitKind kind = GuardLimitKind::newConnections;
	uint32_t limit = 0;
	std::string exemptSet;
	std::string trackSet;
	std::string overSet;
	bool drop = false;
	bool operator==(const GuardLimit &) const = default;
};

// Every kind of rule. A consumer whose behaviour depends on the kind (rendering,
// encoding, kernel-feature fallbacks) decides with an exhaustive std::visit, never with
// std::get_if of one kind: a new kind is then a compile error until each handles it.
using Statement = std::variant<JumpIfNotLocal, ReturnIfDestinationInSet,
			       ReturnIfOutputInterfaceInSet, MatchUnlistedSource, Masquerade,
			       SourceNat, GuardLimit>;

struct Rule {
	Statement statement;
	std::string comment;
	// The named counter (Ruleset::counters) the rule adds a match to, right before its
	// verdict or NAT: "counter name \"masq-v4\"". Empty: none.
	std::string counter = {};
	bool operator==(const Rule &) const = default;
};

// What a connection counter counts: new connections of a family (the nat hook sees the
// first packet of each), by what the agent decided and why.
// The guard's decisions count the connections over one of its limits (the reason says
// which): observed (let through) or dropped, as the mode says.
enum class Decision { notMasqueraded, masqueraded, snat, guardObserved, guardDropped };
enum class DecisionReason {
	destination, // a non-masquerade destination (nomasq-v4 / nomasq-v6)
	source,      // a source masqueradeSourceCIDRs does not list
	interface,   // leaving through a nonMasqueradeInterfaces interface
	none,        // masqueraded or SNATed: nothing exempted it
	newConnections,  // over snatGuard's newConnectionsPerSecond
	openConnections, // over snatGuard's openConnections
};
// Whether the decision is the guard's (its counters go to ip_masq_agent_snat_guard_*).
bool isGuardDecision(Decision decision);

struct CounterLabel {
	Family family = Family::ipv4;
	Decision decision = Decision::masqueraded;
	DecisionReason reason = DecisionReason::none;
	bool operator==(const CounterLabel &) const = default;
};

// The counter's name in the table ("nomasq-dst-v4", "masq-v6", ...) and back: the name
// says what it counts, so that counters read from the kernel need no ruleset to map.
std::string counterName(const CounterLabel &label);
std::optional<CounterLabel> counterLabelOf(std::string_view name);
// The labels' values as /metrics writes them: "not_masqueraded", "destination", ...
const char *decisionName(Decision decision);
const char *reasonName(DecisionReason reason);

// A named counter object of the table (nft "counter NAME { ... }").
struct NamedCounter {
	std::string name; // counterName(label)
	CounterLabel label;
	std::string comment;
	bool operator==(const NamedCounter &) const = default;
};

// A counter's values, as the kernel holds them.
struct CounterValue {
	std::string name;
	uint64_t packets = 0;
	uint64_t bytes = 0;
	bool operator==(const CounterValue &) const = default;
};

struct BaseChainHook {
	int priority; // the hook is always nat/postrouting
	bool operator==(const BaseChainHook &) const = default;
};

struct Chain {
	std::string name;
	std::optional<BaseChainHook> hook; // set: a base chain on nat postrouting
	std::string comment;
	std::vector<Rule> rules;
	bool operator==(const Chain &) const = default;
};

// This node's own address in each family's outputAddress subnet, if it has one there
// (node_addresses.h chooses it): what the ruleset depends on besides the config and the
// flags. Without one, a subnet's family is masqueraded.
struct SubnetAddresses {
	std::optional<Address> ipv4;
	std::optional<Address> ipv6;

	const std::optional<Address> &of(Family family) const
	{
		return family == Family::ipv4 ? ipv4 : ipv6;
	}
	bool operator==(const SubnetAddresses &) const = default;
};

// What is read back of the agent's table besides its sets: the SNAT rules' targets (the
// statements carry them; no set does) and comments.
struct KernelSnatRule {
	Family family;
	AddressRange to;
	std::string comment;
	bool operator==(const KernelSnatRule &) const = default;
};

// One element of a guard's over set, read back from the kernel: `source` went over the
// limit `kind` toward `destination` (address, protocol, port) `attempts` times since the
// element was made (it leaves 10 minutes after the last one).
struct GuardOverKey {
	GuardLimitKind kind = GuardLimitKind::newConnections;
	Address source;
	Address destination;
	uint8_t protocol = 0;
	uint16_t port = 0;
	uint64_t attempts = 0;
	bool operator==(const GuardOverKey &) const = default;
};

// How full a dynamic set is, as the kernel holds it: a full one adds no key.
struct DynamicSetFill {
	std::string set;
	size_t elements = 0;
	uint32_t size = 0; // its declared size
	bool operator==(const DynamicSetFill &) const = default;
};

// The guard's sets read back once: the keys most over each limit (a bounded number per over
// set, the most attempts first) and how full every dynamic set is; the over set's own count
// is how many keys are over its limit, whatever number of them was kept.
struct GuardReading {
	std::vector<GuardOverKey> over;
	std::vector<DynamicSetFill> fill;
};

// The agent's table as adoption and --explain read it back (TableBackend::readTable).
struct KernelTable {
	std::vector<AddressSet> sets;
	std::vector<KernelSnatRule> snatRules; // in the table's order
	bool operator==(const KernelTable &) const = default;
};

// A set the kernel fills from the packet path (flags dynamic), keyed by source address .
// destination address . l4proto . destination port (the guard's): the agent declares it,
// never writes an element, and a replacement keeps it with what it holds (its handle, its
// elements and their state) as long as its declaration stays the same.
struct DynamicSet {
	std::string name;
	Family family = Family::ipv4;
	uint32_t size = 0; // the most elements it holds; a full set adds none
	uint64_t timeoutMs = 0; // an element leaves this long after its last update; 0: never
	bool counter = false; // each element counts the packets that updated it
	std::string comment;
	bool operator==(const DynamicSet &) const = default;
};

// The agent's whole table (family inet). Owned entirely by the agent and replaced whole
// (but for its counters and dynamic sets, which a replacement keeps).
struct Ruleset {
	std::string table;
	std::string comment;
	std::vector<NamedCounter> counters;
	// Declared before `sets`: `nft list` shows sets in the order they were made, and a
	// replacement keeps these (they come first in the kernel's table).
	std::vector<DynamicSet> dynamicSets;
	std::vector<AddressSet> sets;
	std::vector<Chain> chains;
	bool operator==(const Ruleset &) const = default;

	// The destination set (nomasq-v4 / nomasq-v6) of a family, if any.
	const AddressSet *findSet(Family family) const;
	// The set of this name, if any.
	const AddressSet *findSet(std::string_view name) const;
};

// The set of this name in `sets` (a ruleset's, or what the kernel holds), if any.
const AddressSet *findSet(const std::vector<AddressSet> &sets, std::string_view name);

} // namespace ipmasq
