// SPDX-License-Identifier: Apache-2.0
// SNAT capacity: how many of the source ports the agent's rules can give toward one
// destination are in use, from conntrack's entries. The pure part: the agent's ranges
// from its desired ruleset, the kernel's port-range rules, a bounded aggregation and the
// table a person reads. netlink/conntrack_dump.h reads the entries; snat_usage_check.h
// runs the read in the daemon.
//
// Where the numbers come from (the kernel's net/netfilter/nf_nat_core.c, 6.1 and later):
//  - A source-NATed connection holds its reply tuple: (destination address and port,
//    translated source address and port, protocol). nf_nat_used_tuple() refuses a
//    candidate port whose reply tuple another entry holds, so each (translated address,
//    destination address, destination port, protocol) has its own ports: the key here.
//  - The ports nf_nat_l4proto_unique_tuple() picks from: the rule's range (--to-ports)
//    when it gives one; otherwise, by the connection's ORIGINAL source port: below 512
//    1-511, 512 to 1023 600-1023, 1024 and above 1024-65535. ICMP and ICMPv6 translate
//    their identifier, 0-65535. TCP, UDP, UDP-Lite, SCTP and DCCP translate ports; other
//    protocols keep them (no pool, not counted).
//  - find_best_ips_proto() picks the address of a range by a hash of the source and
//    destination addresses: one client always gets the same address toward one
//    destination, so a range of N addresses gives a destination N times the ports over
//    many clients, and one client still only one address's.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ip-masq-agent/model/cidr.h"
#include "ip-masq-agent/conntrack/conntrack_dump.h"
#include "ip-masq-agent/model/node_addresses.h"
#include "ip-masq-agent/model/port_ranges.h"
#include "ip-masq-agent/model/ruleset.h"

namespace ipmasq {

// IP protocol numbers the kernel translates ports (or identifiers) of.
inline constexpr uint8_t kProtoIcmp = 1;
inline constexpr uint8_t kProtoTcp = 6;
inline constexpr uint8_t kProtoUdp = 17;
inline constexpr uint8_t kProtoDccp = 33;
inline constexpr uint8_t kProtoIcmpv6 = 58;
inline constexpr uint8_t kProtoSctp = 132;
inline constexpr uint8_t kProtoUdplite = 136;
// "tcp", "udp", ..., or the number.
std::string protocolName(uint8_t protocol);

// Which ports a connection's translated source comes from: the rule's range, or one of
// the kernel's three default ranges (chosen by the original source port), or ICMP ids.
enum class PortPoolKind : uint8_t {
	toPorts, // the agent's --to-ports (tcp, udp, sctp)
	below512, // 1-511: an original source port below 512
	below1024, // 600-1023: an original source port from 512 to 1023
	unprivileged, // 1024-65535
	icmpIds, // 0-65535
};

struct PortPool {
	PortPoolKind kind = PortPoolKind::unprivileged;
	std::vector<PortRange> ranges;

	uint32_t size() const;
	bool contains(uint16_t port) const;
	std::string toString() const; // "40000-40099", "1024-65535", "1024-29999,32768-65535"
};

// What the agent's rules do to one family's connections, read from the desired ruleset.
struct SnatFamilyPlan {
	// SNAT to these addresses (outputAddress: one, or a range); nullopt: masquerade (to
	// the address of the interface the packet leaves through: one of the node's).
	std::optional<AddressRange> to;
	// --to-ports, for tcp, udp and sctp (the agent's rules match those for the ranges);
	// empty: the kernel's default ranges.
	std::vector<PortRange> toPorts;
	bool operator==(const SnatFamilyPlan &) const = default;
};

struct SnatPlan {
	std::optional<SnatFamilyPlan> ipv4, ipv6; // nullopt: the agent translates none

	const std::optional<SnatFamilyPlan> &of(Family family) const
	{
		return family == Family::ipv4 ? ipv4 : ipv6;
	}
	bool operator==(const SnatPlan &) const = default;
};

// The agent's source NAT per family, from the statements of its ruleset (an SNAT of the
// family first, as the chain's order has it: a packet it SNATs never reaches a later
// masquerade; else a masquerade that covers the family).
SnatPlan snatPlanOf(const Ruleset &ruleset);

// The ports a connection of `protocol` from original source port `sourcePort` gets under
// `plan`, as nf_nat_l4proto_unique_tuple() chooses them; nullopt for a protocol whose
// ports the kernel does not translate.
std::optional<PortPool> portPoolOf(const SnatFamilyPlan &plan, uint8_t protocol,
				   uint16_t sourcePort);

// The usage toward one destination from one translated address.
struct SnatDestination {
	Family family = Family::ipv4;
	uint8_t protocol = 0;
	Address translated;
	Address destination;
	uint16_t port = 0;
	PortPool pool;
	uint32_t connections = 0;

	uint32_t available() const { return pool.size(); }
	double ratio() const { return available() ? double(connections) / available() : 1.0; }
	// "203.0.113.2:443", "[2001:db8::2]:443"; for ICMP the address alone.
	std::string destinationText() const;
};

// How a client holds its entries toward a destination: TCP by conntrack's state (open:
// SYN_SENT, SYN_RECV, ESTABLISHED; TIME_WAIT; any other: FIN_WAIT, CLOSE_WAIT, LAST_ACK,
// CLOSE), every other protocol (UDP, UDP-Lite, SCTP, DCCP, ICMP) as one.
enum class HoldState : uint8_t { tcpOpen, tcpTimeWait, tcpOther, notTcp };
inline constexpr size_t kHoldStates = 4;
HoldState holdStateOf(const ConntrackEntry &entry);
// The metrics' `state` label: "tcp_open", "tcp_time_wait", "tcp_other", "not_tcp".
const char *holdStateLabel(HoldState state);

struct HoldCounts {
	std::array<uint32_t, kHoldStates> byState{};

	uint32_t &operator[](HoldState state) { return byState[static_cast<size_t>(state)]; }
	uint32_t operator[](HoldState state) const { return byState[static_cast<size_t>(state)]; }
	uint64_t total() const;
};

// A client of a destination: the connections' ORIGINAL source (a pod; the node itself for
// its own and hostNetwork traffic), through one translated address (the kernel gives a
// client one address of a range toward a destination).
struct SnatClient {
	Address address;
	Address translated;
	HoldCounts held;
	uint32_t pool = 0; // the ports the agent's rules give the translated address toward it
	// How the node reaches the client, set after the count by whoever can look it up
	// (daemon/snat_usage_check.h, describeClientRoutes); "" when unknown. `reachedThrough`
	// for people ("cali1a2b3c", "veth9f8e (port of cni0)", "this node"), `interface` the
	// most specific interface of it for a label ("veth9f8e"; "" for this node).
	std::string reachedThrough;
	std::string interface;

	// Its share of those ports.
	double share() const { return pool ? double(held.total()) / pool : 1.0; }
};

// Who holds a destination's ports: its clients over every translated address, the most
// entries first, at most the counter's topClients; then what was left out.
struct SnatHolders {
	std::vector<SnatClient> top;
	uint64_t clients = 0; // (client, translated address) pairs that hold its entries
	uint64_t clientsLeftOut = 0; // of those, not in `top`
	uint64_t connectionsLeftOut = 0; // held by the clients left out
	// Its connections whose client the read did not keep (its bound of client and
	// destination pairs): in no figure above.
	uint64_t unattributed = 0;
};

// One destination over every address the agent's rules may give it: a range of N
// addresses gives it N times the ports, spread over its clients by the kernel's hash.
struct SnatDestinationTotal {
	Family family = Family::ipv4;
	uint8_t protocol = 0;
	Address destination;
	uint16_t port = 0;
	PortPoolKind pool = PortPoolKind::unprivileged;
	uint32_t connections = 0; // over every translated address
	size_t addressesInUse = 0; // translated addresses that hold connections toward it
	uint64_t addresses = 0; // the agent's addresses it may get (the range's size; 1 for masquerade)
	uint64_t available = 0; // addresses x the pool's ports
	uint32_t poolSize = 0; // the ports of one address
	size_t rank = 0; // of its busiest translated address in SnatUsage::top (1 is the first)
	SnatHolders holders;
};

struct SnatUsage {
	// The destinations with the highest usage ratio first (then the most connections), at
	// most the counter's `top`.
	std::vector<SnatDestination> top;
	// The same destinations over all of the agent's addresses, in the order of `top`
	// (one per distinct destination of `top`), each with the clients that hold its ports.
	std::vector<SnatDestinationTotal> totals;
	double maxRatio = 0; // 0 when the agent translates nothing now
	size_t destinations = 0; // keys counted (destination x translated address x protocol)
	size_t aboveWarning = 0; // ratio >= kWarningRatio
	size_t exhausted = 0; // ratio >= 1
	uint64_t connections = 0; // the agent's, counted in `destinations`
	// The agent's connections toward keys beyond maxDestinations: counted, not attributed.
	uint64_t leftOut = 0;
	// The agent's connections whose client was not kept (beyond maxClientPairs), toward any
	// destination: counted toward their destination, not toward a client.
	uint64_t unattributedClients = 0;
	// Source-NATed connections the agent's rules did not make (another address, or
	// ports outside the agent's range), shown apart, never in the figures above.
	uint64_t otherConnections = 0;
	std::vector<SnatDestination> otherTop; // the most connections first
	size_t clientsPerDestination = 0; // the bound of each total's holders.top
	uint64_t entriesRead = 0; // every entry the dump gave
	bool kernelFiltered = false; // the kernel sent source-NATed entries only

	static constexpr double kWarningRatio = 0.8;
};

// What masquerade translates to: this node's addresses, or nullopt when they are not known
// (then any translated address counts as the node's).
std::optional<std::vector<Address>> translatedByMasquerade(const NodeAddresses &node);

// The aggregation: add() every entry of a dump, then finish(). Memory is bounded by the
// limits whatever conntrack holds; time is linear in the entries.
class SnatUsageCounter
{
public:
	struct Limits {
		// Distinct keys kept (about 100 bytes each): 65,536 is under 8 MiB. Beyond it a
		// new key's connections are counted in leftOut.
		size_t maxDestinations = 65536;
		size_t maxOtherDestinations = 4096;
		size_t top = 10; // kTopDestinations
		// Distinct (destination key, client) pairs kept, each with its counts by state
		// (about 80 bytes each: 65,536 is about 5 MiB). Beyond it a new pair's connections
		// count toward their destination only, as unattributed to a client.
		size_t maxClientPairs = 65536;
		size_t topClients = 10; // kTopClients
	};
	// `nodeAddresses`: the node's addresses (what masquerade translates to); nullopt when
	// they cannot be read, and then any address counts as the node's.
	SnatUsageCounter(SnatPlan plan, std::optional<std::vector<Address>> nodeAddresses,
			 Limits limits);
	SnatUsageCounter(SnatPlan plan, std::optional<std::vector<Address>> nodeAddresses);

	// Only entries toward this address (--explain).
	void onlyToward(const Address &destination) { only_ = destination; }
	void add(const ConntrackEntry &entry);
	void kernelFiltered(bool filtered) { kernelFiltered_ = filtered; }
	SnatUsage finish() const;

	// The key, packed: two 16-byte addresses in network order, the port, the protocol,
	// the family and the pool.
	struct Key {
		std::array<uint8_t, 16> translated{}, destination{};
		uint16_t port = 0;
		uint8_t protocol = 0;
		uint8_t family = 0;
		uint8_t pool = 0;
		bool operator==(const Key &) const = default;
	};
	struct KeyHash {
		size_t operator()(const Key &key) const;
	};
	// A client of one of the agent's keys: the key's index (its order of arrival) and
	// the client's address, packed.
	struct ClientKey {
		uint32_t key = 0;
		std::array<uint8_t, 16> client{};
		bool operator==(const ClientKey &) const = default;
	};
	struct ClientKeyHash {
		size_t operator()(const ClientKey &key) const;
	};

private:
	// What the agent's keys count: their connections, and their clients' pairs.
	struct KeyCounts {
		uint32_t connections = 0;
		uint32_t index = 0; // ClientKey::key
		uint32_t unattributed = 0; // connections beyond maxClientPairs
	};
	using AgentMap = std::unordered_map<Key, KeyCounts, KeyHash>;

	bool isAgents(const ConntrackEntry &entry, const SnatFamilyPlan &plan) const;
	Key keyOf(const ConntrackEntry &entry, PortPoolKind pool) const;
	void countAgents(const Key &key, const ConntrackEntry &entry);
	void countOthers(const Key &key);
	SnatDestination destinationOf(const Key &key, uint32_t connections) const;
	// The top destinations over every address of the agent's, with their holders.
	std::vector<SnatDestinationTotal> totalsOf(const std::vector<SnatDestination> &top) const;
	// Each total's clients, from one walk of the pairs; `totalOf` and `keyOf` by key index.
	void holdersOf(std::vector<SnatDestinationTotal> &totals, const std::vector<int32_t> &totalOf,
		       const std::vector<const Key *> &keyOf) const;

	SnatPlan plan_;
	std::optional<std::vector<Address>> nodeAddresses_; // sorted
	Limits limits_;
	std::optional<Address> only_;
	AgentMap agents_;
	std::unordered_map<Key, uint32_t, KeyHash> others_;
	std::unordered_map<ClientKey, HoldCounts, ClientKeyHash> clients_;
	uint64_t connections_ = 0, leftOut_ = 0, others_connections_ = 0, othersLeftOut_ = 0;
	uint64_t unattributedClients_ = 0;
	uint64_t entries_ = 0;
	bool kernelFiltered_ = false;
};

// The number of destinations /metrics and the table show.
inline constexpr size_t kTopDestinations = 10;
// The number of clients /metrics and the table show for each of those destinations.
inline constexpr size_t kTopClients = 10;

// The table a person reads (--snat-usage, /snat-usage): the top destinations, the totals
// over the agent's addresses, what was left out and other rules' NAT, in a few lines.
std::string snatUsageTable(const SnatUsage &usage);

// For --explain: a clause on the agent's connections toward one destination (a counter
// made with onlyToward()), "; SNAT ports in use toward it now: tcp port 443 from
// 203.0.113.1: 90 of 100 (90.0%)"; "" when the agent's rules translate none toward it.
std::string snatUsageClause(const SnatUsage &usage);

// Reads conntrack's source-NATed entries into `counter` (netlink/conntrack_dump.h): what
// the daemon's read, --snat-usage and --explain do.
Result<netlink::ConntrackDump> countSourceNatEntries(SnatUsageCounter &counter);

} // namespace ipmasq
