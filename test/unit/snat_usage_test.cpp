// SPDX-License-Identifier: Apache-2.0
// SNAT usage, the pure part: the agent's ranges from its ruleset, the kernel's port-range
// rules (nf_nat_l4proto_unique_tuple), the aggregation and its bounds, the table.
#include <catch2/catch.hpp>

#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"
#include <arpa/inet.h>
#include <cstring>
#include <regex>
#include <sys/socket.h>

#include <libmnl/libmnl.h>
#include <linux/netfilter/nf_conntrack_common.h>
#include <linux/netfilter/nf_conntrack_tcp.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_conntrack.h>
#include <linux/netlink.h>

#include "ip-masq-agent/conntrack/conntrack_dump.h"
#include "ip-masq-agent/conntrack/snat_usage.h"

using namespace ipmasq;

namespace {

Address address(const char *text)
{
	auto parsed = parseAddress(text);
	REQUIRE(parsed);
	return *parsed;
}

// A source-NATed TCP connection from `client` (port `clientPort`) to `destination`:443,
// translated to `translated`:`port`.
ConntrackEntry natted(const char *client, uint16_t clientPort, const char *destination,
		      const char *translated, uint16_t port, uint8_t protocol = kProtoTcp)
{
	ConntrackEntry e;
	e.family = address(client).family;
	e.protocol = protocol;
	e.sourceNat = true;
	e.originalSource = address(client);
	e.originalSourcePort = clientPort;
	e.destination = address(destination);
	e.destinationPort = 443;
	e.translatedSource = address(translated);
	e.translatedPort = port;
	return e;
}

// The same in TCP's state `state` (TCP_CONNTRACK_*).
ConntrackEntry tcpIn(uint8_t state, const char *client, uint16_t clientPort, const char *destination,
		     const char *translated, uint16_t port)
{
	ConntrackEntry e = natted(client, clientPort, destination, translated, port);
	e.tcpState = state;
	return e;
}

SnatPlan masqueradePlan(std::vector<PortRange> toPorts = {})
{
	SnatPlan plan;
	plan.ipv4 = SnatFamilyPlan{std::nullopt, std::move(toPorts)};
	return plan;
}

const std::vector<Address> kNode{parseAddress("203.0.113.1").value()};

} // namespace

TEST_CASE("the kernel's ports: the rule's range, else by the original source port; ICMP ids")
{
	const SnatFamilyPlan masquerade;
	// nf_nat_l4proto_unique_tuple without NF_NAT_RANGE_PROTO_SPECIFIED.
	CHECK(portPoolOf(masquerade, kProtoTcp, 0)->ranges == std::vector<PortRange>{{1, 511}});
	CHECK(portPoolOf(masquerade, kProtoTcp, 511)->ranges == std::vector<PortRange>{{1, 511}});
	CHECK(portPoolOf(masquerade, kProtoTcp, 512)->ranges == std::vector<PortRange>{{600, 1023}});
	CHECK(portPoolOf(masquerade, kProtoUdp, 1023)->ranges == std::vector<PortRange>{{600, 1023}});
	CHECK(portPoolOf(masquerade, kProtoSctp, 1024)->ranges == std::vector<PortRange>{{1024, 65535}});
	CHECK(portPoolOf(masquerade, kProtoTcp, 65535)->size() == 64512);
	CHECK(portPoolOf(masquerade, kProtoTcp, 100)->size() == 511);
	CHECK(portPoolOf(masquerade, kProtoTcp, 700)->size() == 424);
	CHECK(portPoolOf(masquerade, kProtoIcmp, 7)->size() == 65536);
	CHECK(portPoolOf(masquerade, kProtoIcmpv6, 7)->kind == PortPoolKind::icmpIds);
	// GRE and the rest keep their ports: nothing to run out of.
	CHECK_FALSE(portPoolOf(masquerade, 47, 0));

	// --to-ports covers tcp, udp and sctp, whatever the source port; UDP-Lite and DCCP
	// reach the agent's rule without ports, the kernel's default.
	const SnatFamilyPlan ranged{std::nullopt, {{40000, 40099}}};
	CHECK(portPoolOf(ranged, kProtoTcp, 80)->ranges == std::vector<PortRange>{{40000, 40099}});
	CHECK(portPoolOf(ranged, kProtoUdp, 50000)->size() == 100);
	CHECK(portPoolOf(ranged, kProtoUdplite, 50000)->size() == 64512);
	CHECK(portPoolOf(ranged, kProtoDccp, 80)->size() == 511);
	// Several ranges: every one of them (the agent's rules pick one per flow in
	// proportion to its size).
	const SnatFamilyPlan two{std::nullopt, {{1024, 29999}, {32768, 65535}}};
	const PortPool pool = *portPoolOf(two, kProtoTcp, 40000);
	CHECK(pool.size() == 28976 + 32768);
	CHECK(pool.contains(1024));
	CHECK_FALSE(pool.contains(30000));
	CHECK(pool.toString() == "1024-29999,32768-65535");
}

TEST_CASE("the agent's plan comes from its ruleset: masquerade, --to-ports, outputAddress, families")
{
	RulesetOptions options;
	const Config config = defaultConfig({});
	SnatPlan plan = snatPlanOf(buildRuleset(config, options));
	REQUIRE(plan.ipv4);
	CHECK_FALSE(plan.ipv4->to);
	CHECK(plan.ipv4->toPorts.empty());
	CHECK_FALSE(plan.ipv6); // without --enable-ipv6 no IPv6 reaches the agent's chain

	options.enableIpv6 = true;
	options.toPorts = {PortRange{32768, 65535}, PortRange{1024, 29999}};
	plan = snatPlanOf(buildRuleset(config, options));
	REQUIRE(plan.ipv6);
	CHECK(plan.ipv4->toPorts == std::vector<PortRange>{{1024, 29999}, {32768, 65535}});
	CHECK(plan.ipv6->toPorts == plan.ipv4->toPorts);

	// outputAddress as a range: SNAT for IPv4, masquerade stays for IPv6.
	Config snat = config;
	snat.outputAddress = parseOutputAddress("198.51.100.10-198.51.100.12").value();
	options.toPorts = {PortRange{40000, 40099}};
	for (const bool counters : {true, false}) {
		options.connectionCounters = counters;
		plan = snatPlanOf(buildRuleset(snat, options));
		REQUIRE(plan.ipv4);
		REQUIRE(plan.ipv4->to);
		CHECK(plan.ipv4->to->toString() == "198.51.100.10-198.51.100.12");
		CHECK(plan.ipv4->toPorts == std::vector<PortRange>{{40000, 40099}});
		REQUIRE(plan.ipv6);
		CHECK_FALSE(plan.ipv6->to);
	}
}

TEST_CASE("usage per destination and translated address: the agent's only, others apart")
{
	SnatUsageCounter counter(masqueradePlan({{40000, 40099}}), kNode);
	for (uint16_t i = 0; i < 90; i++)
		counter.add(natted("198.51.100.2", 50000 + i, "203.0.113.2", "203.0.113.1", 40000 + i));
	for (uint16_t i = 0; i < 3; i++)
		counter.add(natted("198.51.100.2", 51000 + i, "192.0.2.2", "203.0.113.1", 40000 + i));
	// Another table's NAT: another address; or the node's address but outside the range.
	counter.add(natted("198.51.100.2", 52000, "203.0.113.2", "198.18.0.1", 40001));
	counter.add(natted("198.51.100.2", 52001, "203.0.113.2", "203.0.113.1", 1025));
	// Not source-NATed (a kernel that did not filter): not counted at all.
	ConntrackEntry plain = natted("198.51.100.2", 52002, "203.0.113.2", "198.51.100.2", 52002);
	plain.sourceNat = false;
	counter.add(plain);

	const SnatUsage usage = counter.finish();
	CHECK(usage.entriesRead == 96);
	CHECK(usage.connections == 93);
	CHECK(usage.otherConnections == 2);
	CHECK(usage.destinations == 2);
	REQUIRE(usage.top.size() == 2);
	CHECK(usage.top[0].destinationText() == "203.0.113.2:443");
	CHECK(usage.top[0].translated.toString() == "203.0.113.1");
	CHECK(usage.top[0].connections == 90);
	CHECK(usage.top[0].available() == 100);
	CHECK(usage.top[0].ratio() == Approx(0.9));
	CHECK(usage.top[1].destinationText() == "192.0.2.2:443");
	CHECK(usage.top[1].ratio() == Approx(0.03));
	CHECK(usage.maxRatio == Approx(0.9));
	CHECK(usage.aboveWarning == 1);
	CHECK(usage.exhausted == 0);
	REQUIRE(usage.otherTop.size() == 2);
	CHECK(usage.otherTop[0].connections == 1);
}

TEST_CASE("the default ranges split one destination by the clients' source ports")
{
	SnatUsageCounter counter(masqueradePlan(), kNode);
	for (uint16_t i = 0; i < 100; i++) // a privileged client port: 1-511
		counter.add(natted("198.51.100.2", 100, "203.0.113.2", "203.0.113.1", 1 + i));
	for (uint16_t i = 0; i < 100; i++)
		counter.add(natted("198.51.100.3", 40000 + i, "203.0.113.2", "203.0.113.1", 2000 + i));
	const SnatUsage usage = counter.finish();
	REQUIRE(usage.top.size() == 2);
	CHECK(usage.top[0].available() == 511);
	CHECK(usage.top[0].ratio() == Approx(100.0 / 511));
	CHECK(usage.top[1].available() == 64512);
	// A translated port outside its pool is not the agent's (another rule's range).
	SnatUsageCounter strict(masqueradePlan(), kNode);
	strict.add(natted("198.51.100.2", 100, "203.0.113.2", "203.0.113.1", 2000));
	CHECK(strict.finish().otherConnections == 1);
}

TEST_CASE("a range of addresses: each address has its own ports; the destination has N times")
{
	SnatPlan plan;
	plan.ipv4 = SnatFamilyPlan{AddressRange{address("198.51.100.10"), address("198.51.100.12")},
				   {{40000, 40099}}};
	SnatUsageCounter counter(plan, kNode);
	const char *addresses[] = {"198.51.100.10", "198.51.100.11", "198.51.100.12"};
	for (uint16_t i = 0; i < 90; i++)
		counter.add(natted("198.51.100.2", 50000 + i, "203.0.113.2", addresses[i % 3], 40000 + i / 3));
	// The node's own address is not the agent's when it SNATs.
	counter.add(natted("198.51.100.2", 60000, "203.0.113.2", "203.0.113.1", 40000));
	const SnatUsage usage = counter.finish();
	CHECK(usage.otherConnections == 1);
	REQUIRE(usage.top.size() == 3);
	for (const SnatDestination &d : usage.top) {
		CHECK(d.connections == 30);
		CHECK(d.available() == 100);
	}
	REQUIRE(usage.totals.size() == 1);
	CHECK(usage.totals[0].addresses == 3);
	CHECK(usage.totals[0].addressesInUse == 3);
	CHECK(usage.totals[0].available == 300);
	CHECK(usage.totals[0].connections == 90);
	CHECK_THAT(snatUsageTable(usage),
		   Catch::Contains("tcp 203.0.113.2:443 over the agent's 3 addresses: 90 connections "
				   "from 3 of them, 300 ports in all (30.0%)"));
}

TEST_CASE("bounded: keys beyond the limit are counted, not kept; the top is a fixed size")
{
	SnatUsageCounter::Limits limits;
	limits.maxDestinations = 4;
	limits.maxOtherDestinations = 1;
	limits.top = 2;
	SnatUsageCounter counter(masqueradePlan(), kNode, limits);
	for (uint16_t d = 0; d < 10; d++) {
		const std::string destination = "192.0.2." + std::to_string(d + 1);
		for (uint16_t i = 0; i <= d; i++)
			counter.add(natted("198.51.100.2", 50000 + i, destination.c_str(), "203.0.113.1",
					   2000 + i));
	}
	for (uint16_t i = 0; i < 3; i++)
		counter.add(natted("198.51.100.2", 50000, ("198.18.0." + std::to_string(i + 1)).c_str(),
				   "198.18.255.1", 2000));
	const SnatUsage usage = counter.finish();
	CHECK(usage.destinations == 4);
	CHECK(usage.connections == 55);
	CHECK(usage.leftOut == 55 - (1 + 2 + 3 + 4));
	REQUIRE(usage.top.size() == 2);
	CHECK(usage.top[0].connections == 4); // the busiest of those kept
	CHECK(usage.otherConnections == 3);
	CHECK(usage.otherTop.size() == 1);
	CHECK_THAT(snatUsageTable(usage), Catch::Contains("Incomplete: 45 connections"));
}

TEST_CASE("masquerade with the node's addresses unknown: any translated address counts")
{
	SnatUsageCounter unknown(masqueradePlan(), std::nullopt);
	unknown.add(natted("198.51.100.2", 50000, "203.0.113.2", "198.18.0.9", 2000));
	CHECK(unknown.finish().connections == 1);
	SnatUsageCounter known(masqueradePlan(), kNode);
	known.add(natted("198.51.100.2", 50000, "203.0.113.2", "198.18.0.9", 2000));
	CHECK(known.finish().connections == 0);
}

TEST_CASE("IPv6 and ICMP: the destination's text, the id pool, the family's own plan")
{
	SnatPlan plan;
	plan.ipv6 = SnatFamilyPlan{};
	SnatUsageCounter counter(plan, std::vector<Address>{address("2001:db8:2::1")});
	counter.add(natted("2001:db8:1::2", 50000, "2001:db8:2::2", "2001:db8:2::1", 2000));
	ConntrackEntry ping = natted("2001:db8:1::2", 7, "2001:db8:2::2", "2001:db8:2::1", 9, kProtoIcmpv6);
	counter.add(ping);
	// IPv4 has no plan: the agent translates none of it.
	counter.add(natted("198.51.100.2", 50000, "203.0.113.2", "203.0.113.1", 2000));
	const SnatUsage usage = counter.finish();
	CHECK(usage.connections == 2);
	CHECK(usage.otherConnections == 1);
	REQUIRE(usage.top.size() == 2);
	std::vector<std::string> texts{usage.top[0].destinationText(), usage.top[1].destinationText()};
	std::sort(texts.begin(), texts.end());
	CHECK(texts == std::vector<std::string>{"2001:db8:2::2", "[2001:db8:2::2]:443"});
}

TEST_CASE("--explain's clause: only the destination asked about, none without connections")
{
	SnatUsageCounter counter(masqueradePlan({{40000, 40099}}), kNode);
	counter.onlyToward(address("203.0.113.2"));
	for (uint16_t i = 0; i < 90; i++)
		counter.add(natted("198.51.100.2", 50000 + i, "203.0.113.2", "203.0.113.1", 40000 + i));
	counter.add(natted("198.51.100.2", 51000, "192.0.2.2", "203.0.113.1", 40000));
	CHECK(snatUsageClause(counter.finish()) ==
	      "; SNAT ports in use toward it now: tcp port 443 from 203.0.113.1: 90 of 100 (90.0%)");
	SnatUsageCounter none(masqueradePlan(), kNode);
	none.onlyToward(address("198.18.0.1"));
	none.add(natted("198.51.100.2", 51000, "192.0.2.2", "203.0.113.1", 2000));
	CHECK(snatUsageClause(none.finish()).empty());
}

TEST_CASE("exhausted: a ratio of 1 counts as exhausted and above the warning")
{
	SnatUsageCounter counter(masqueradePlan({{40000, 40099}}), kNode);
	for (uint16_t i = 0; i < 100; i++)
		counter.add(natted("198.51.100.2", 50000 + i, "203.0.113.2", "203.0.113.1", 40000 + i));
	const SnatUsage usage = counter.finish();
	CHECK(usage.maxRatio == 1.0);
	CHECK(usage.exhausted == 1);
	CHECK(usage.aboveWarning == 1);
	CHECK_THAT(snatUsageTable(usage), Catch::Contains("1 exhausted"));
}

TEST_CASE("the entry parser refuses a message whose length is not a multiple of 4")
{
	// The fuzzer's crash-unaligned-length: libmnl reads attributes up to the length
	// rounded up, past the message.
	std::vector<uint8_t> bytes(NLMSG_HDRLEN + 4 + 7, 0);
	auto *nlh = reinterpret_cast<nlmsghdr *>(bytes.data());
	nlh->nlmsg_len = static_cast<uint32_t>(bytes.size());
	nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW;
	bytes[NLMSG_HDRLEN] = AF_INET;
	const uint16_t attr[2] = {7, CTA_STATUS}; // a 3-byte status: the message ends there
	std::memcpy(bytes.data() + NLMSG_HDRLEN + 4, attr, sizeof(attr));
	auto parsed = netlink::parseConntrackEntry(nlh);
	REQUIRE_FALSE(parsed);
	CHECK_THAT(parsed.error().message, Catch::Contains("not a multiple of 4"));
}

TEST_CASE("the table's counts: one destination, connection and entry in the singular")
{
	SnatUsageCounter one(masqueradePlan({{40000, 40099}}), kNode);
	one.add(natted("198.51.100.2", 50000, "203.0.113.2", "203.0.113.1", 40000));
	const std::string table = snatUsageTable(one.finish());
	CHECK_THAT(table, Catch::Contains("1 connection of the agent's rules toward 1 destination (per "
					  "translated address)") &&
				  Catch::Contains("Read 1 conntrack entry (") && !Catch::Contains("1 destinations"));

	SnatUsageCounter two(masqueradePlan({{40000, 40099}}), kNode);
	two.add(natted("198.51.100.2", 50000, "203.0.113.2", "203.0.113.1", 40000));
	two.add(natted("198.51.100.2", 50001, "192.0.2.2", "203.0.113.1", 40001));
	CHECK_THAT(snatUsageTable(two.finish()),
		   Catch::Contains("2 connections of the agent's rules toward 2 destinations") &&
			   Catch::Contains("Read 2 conntrack entries ("));
}

TEST_CASE("who holds the ports: clients ranked by entries held, TCP by state, their share of the ports")
{
	SnatUsageCounter counter(masqueradePlan({{40000, 40299}}), kNode);
	uint16_t port = 40000;
	const auto add = [&](uint8_t state, const char *client, int n) {
		for (int i = 0; i < n; i++, port++)
			counter.add(tcpIn(state, client, port, "203.0.113.2", "203.0.113.1", port));
	};
	add(TCP_CONNTRACK_ESTABLISHED, "198.51.100.3", 15);
	add(TCP_CONNTRACK_ESTABLISHED, "198.51.100.2", 118);
	add(TCP_CONNTRACK_SYN_SENT, "198.51.100.2", 1);
	add(TCP_CONNTRACK_SYN_RECV, "198.51.100.2", 1);
	add(TCP_CONNTRACK_TIME_WAIT, "198.51.100.2", 80);
	for (const uint8_t closing : {TCP_CONNTRACK_FIN_WAIT, TCP_CONNTRACK_CLOSE_WAIT, TCP_CONNTRACK_LAST_ACK,
				      TCP_CONNTRACK_CLOSE, TCP_CONNTRACK_NONE})
		add(closing, "198.51.100.4", 1);
	ConntrackEntry stateless = natted("198.51.100.4", 1, "203.0.113.2", "203.0.113.1", port++);
	counter.add(stateless); // no state sent: another state, not open
	// UDP toward the same address and port: another destination, held apart.
	for (uint16_t i = 0; i < 7; i++)
		counter.add(natted("198.51.100.3", 50000 + i, "203.0.113.2", "203.0.113.1", 40000 + i, kProtoUdp));

	const SnatUsage usage = counter.finish();
	REQUIRE(usage.totals.size() == 2);
	const SnatDestinationTotal &tcp = usage.totals[0];
	CHECK(tcp.protocol == kProtoTcp);
	CHECK(tcp.rank == 1);
	CHECK(tcp.connections == 221);
	const SnatHolders &h = tcp.holders;
	CHECK(h.clients == 3);
	CHECK(h.clientsLeftOut == 0);
	CHECK(h.connectionsLeftOut == 0);
	CHECK(h.unattributed == 0);
	REQUIRE(h.top.size() == 3);
	CHECK(h.top[0].address.toString() == "198.51.100.2");
	CHECK(h.top[0].translated.toString() == "203.0.113.1");
	CHECK(h.top[0].held[HoldState::tcpOpen] == 120);
	CHECK(h.top[0].held[HoldState::tcpTimeWait] == 80);
	CHECK(h.top[0].held[HoldState::tcpOther] == 0);
	CHECK(h.top[0].held.total() == 200);
	CHECK(h.top[0].share() == Approx(200.0 / 300));
	CHECK(h.top[1].address.toString() == "198.51.100.3");
	CHECK(h.top[1].held[HoldState::tcpOpen] == 15);
	CHECK(h.top[2].address.toString() == "198.51.100.4");
	CHECK(h.top[2].held[HoldState::tcpOther] == 6);
	CHECK(h.top[2].held[HoldState::tcpOpen] == 0);

	const SnatDestinationTotal &udp = usage.totals[1];
	CHECK(udp.protocol == kProtoUdp);
	REQUIRE(udp.holders.top.size() == 1);
	CHECK(udp.holders.top[0].held[HoldState::notTcp] == 7);
	CHECK(udp.holders.top[0].held.total() == 7);

	const std::string table = snatUsageTable(usage);
	CHECK_THAT(table, Catch::Contains("tcp 203.0.113.2:443, translated to 203.0.113.1 (300 ports): 221 "
					  "connections from 3 clients\n"));
	CHECK_THAT(table, Catch::Contains("  66.7%     200     120        80       0  198.51.100.2 "));
	CHECK_THAT(table, Catch::Contains("   2.0%       6       0         0       6  198.51.100.4 "));
	CHECK_THAT(table, Catch::Contains("udp 203.0.113.2:443, translated to 203.0.113.1 (300 ports): 7 "
					  "connections from 1 client\n"));
	CHECK_THAT(table, Catch::Contains("   2.3%       7  198.51.100.3 "));
	CHECK_THAT(table, !Catch::Contains("left out") && !Catch::Contains("TRANSLATED SOURCE    "
									    "                   REACHED"));
	CHECK(std::string(holdStateLabel(HoldState::tcpTimeWait)) == "tcp_time_wait");
	CHECK(std::string(holdStateLabel(HoldState::notTcp)) == "not_tcp");
}

TEST_CASE("who holds the ports, bounded: the top clients, the rest counted; pairs past the bound unattributed")
{
	SnatUsageCounter::Limits limits;
	limits.topClients = 3;
	limits.maxClientPairs = 8;
	SnatUsageCounter counter(masqueradePlan(), kNode, limits);
	uint16_t port = 2000;
	// Six clients toward one destination, client i with i + 1 connections; then four more
	// destinations, each with a client of its own: the eighth pair is the last kept.
	for (int i = 0; i < 6; i++)
		for (int n = 0; n <= i; n++, port++)
			counter.add(tcpIn(TCP_CONNTRACK_ESTABLISHED, ("198.51.100." + std::to_string(10 + i)).c_str(),
					  port, "203.0.113.2", "203.0.113.1", port));
	for (int d = 0; d < 4; d++)
		for (int n = 0; n < 2; n++, port++)
			counter.add(tcpIn(TCP_CONNTRACK_ESTABLISHED, "198.51.100.20", port,
					  ("192.0.2." + std::to_string(d + 1)).c_str(), "203.0.113.1", port));
	// A new client of the first destination, past the bound: counted toward it, not kept.
	counter.add(tcpIn(TCP_CONNTRACK_ESTABLISHED, "198.51.100.30", port, "203.0.113.2", "203.0.113.1", port));
	port++;

	const SnatUsage usage = counter.finish();
	CHECK(usage.unattributedClients == 2 * 2 + 1);
	REQUIRE(usage.totals.size() == 5);
	const SnatDestinationTotal &busiest = usage.totals[0];
	CHECK(busiest.destination.toString() == "203.0.113.2");
	CHECK(busiest.connections == 21 + 1);
	const SnatHolders &h = busiest.holders;
	CHECK(h.clients == 6);
	REQUIRE(h.top.size() == 3);
	CHECK(h.top[0].address.toString() == "198.51.100.15");
	CHECK(h.top[0].held.total() == 6);
	CHECK(h.top[2].address.toString() == "198.51.100.13");
	CHECK(h.clientsLeftOut == 3);
	CHECK(h.connectionsLeftOut == 1 + 2 + 3);
	CHECK(h.unattributed == 1);
	// Two destinations got their pair, two did not.
	size_t kept = 0, unattributed = 0;
	for (size_t t = 1; t < usage.totals.size(); t++) {
		kept += usage.totals[t].holders.top.size();
		unattributed += usage.totals[t].holders.unattributed;
	}
	CHECK(kept == 2);
	CHECK(unattributed == 4);
	const std::string table = snatUsageTable(usage);
	CHECK_THAT(table, Catch::Contains("and 3 more clients with 6 connections, left out (at most 3 shown)"));
	CHECK_THAT(table, Catch::Contains("and 1 connection whose client the read did not keep"));

	// No pairs at all: every connection unattributed, the destinations still counted.
	limits.maxClientPairs = 0;
	SnatUsageCounter none(masqueradePlan(), kNode, limits);
	none.add(tcpIn(TCP_CONNTRACK_ESTABLISHED, "198.51.100.2", 2000, "203.0.113.2", "203.0.113.1", 2000));
	const SnatUsage noClients = none.finish();
	CHECK(noClients.connections == 1);
	CHECK(noClients.unattributedClients == 1);
	REQUIRE(noClients.totals.size() == 1);
	CHECK(noClients.totals[0].holders.top.empty());
	CHECK(noClients.totals[0].holders.unattributed == 1);
}

TEST_CASE("who holds the ports over a range of addresses: each client with its translated address")
{
	SnatPlan plan;
	plan.ipv4 = SnatFamilyPlan{AddressRange{address("198.51.100.10"), address("198.51.100.12")},
				   {{40000, 40099}}};
	SnatUsageCounter counter(plan, kNode);
	// The kernel gives each client one address of the range toward a destination.
	for (uint16_t i = 0; i < 30; i++)
		counter.add(tcpIn(TCP_CONNTRACK_ESTABLISHED, "198.18.0.1", 50000 + i, "203.0.113.2",
				  "198.51.100.10", 40000 + i));
	for (uint16_t i = 0; i < 20; i++)
		counter.add(tcpIn(TCP_CONNTRACK_ESTABLISHED, "198.18.0.2", 50000 + i, "203.0.113.2",
				  "198.51.100.12", 40000 + i));
	const SnatUsage usage = counter.finish();
	REQUIRE(usage.totals.size() == 1);
	const SnatHolders &h = usage.totals[0].holders;
	REQUIRE(h.top.size() == 2);
	CHECK(h.top[0].translated.toString() == "198.51.100.10");
	CHECK(h.top[0].share() == Approx(0.3)); // of its address's 100 ports
	CHECK(h.top[1].translated.toString() == "198.51.100.12");
	const std::string table = snatUsageTable(usage);
	CHECK_THAT(table, Catch::Contains("tcp 203.0.113.2:443, translated to 2 of the agent's addresses (100 "
					  "ports each): 50 connections from 2 clients"));
	CHECK_THAT(table, Catch::Contains("TRANSLATED SOURCE"));
	CHECK(std::regex_search(table, std::regex("30\\.0% +30 +30 +0 +0  198\\.18\\.0\\.1 +198\\.51\\.100\\.10 +-\n")));
}

TEST_CASE("who holds the ports, IPv6: the client's address in full")
{
	SnatPlan plan;
	plan.ipv6 = SnatFamilyPlan{};
	SnatUsageCounter counter(plan, std::vector<Address>{address("2001:db8:2::1")});
	counter.add(tcpIn(TCP_CONNTRACK_TIME_WAIT, "2001:db8:1::2", 50000, "2001:db8:2::2", "2001:db8:2::1", 2000));
	const SnatUsage usage = counter.finish();
	REQUIRE(usage.totals.size() == 1);
	REQUIRE(usage.totals[0].holders.top.size() == 1);
	CHECK(usage.totals[0].holders.top[0].address.toString() == "2001:db8:1::2");
	CHECK(usage.totals[0].holders.top[0].held[HoldState::tcpTimeWait] == 1);
	CHECK_THAT(snatUsageTable(usage),
		   Catch::Contains("tcp [2001:db8:2::2]:443, translated to 2001:db8:2::1 (64512 ports): 1 "
				   "connection from 1 client"));
}

namespace {

// A conntrack entry message as the kernel sends it: a TCP flow's tuples and status, and
// CTA_PROTOINFO with TCP's state when `state` is given; `stateBytes` its size.
std::vector<uint8_t> entryMessage(std::optional<uint8_t> state, size_t stateBytes = 1)
{
	std::vector<uint8_t> buffer(MNL_SOCKET_BUFFER_SIZE);
	nlmsghdr *nlh = mnl_nlmsg_put_header(buffer.data());
	nlh->nlmsg_type = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW;
	auto *gen = static_cast<nfgenmsg *>(mnl_nlmsg_put_extra_header(nlh, sizeof(nfgenmsg)));
	gen->nfgen_family = AF_INET;
	const auto tuple = [&](uint16_t type, uint32_t source, uint32_t destination, uint16_t sport,
			       uint16_t dport) {
		nlattr *outer = mnl_attr_nest_start(nlh, type);
		nlattr *ip = mnl_attr_nest_start(nlh, CTA_TUPLE_IP);
		mnl_attr_put_u32(nlh, CTA_IP_V4_SRC, htonl(source));
		mnl_attr_put_u32(nlh, CTA_IP_V4_DST, htonl(destination));
		mnl_attr_nest_end(nlh, ip);
		nlattr *proto = mnl_attr_nest_start(nlh, CTA_TUPLE_PROTO);
		mnl_attr_put_u8(nlh, CTA_PROTO_NUM, kProtoTcp);
		mnl_attr_put_u16(nlh, CTA_PROTO_SRC_PORT, htons(sport));
		mnl_attr_put_u16(nlh, CTA_PROTO_DST_PORT, htons(dport));
		mnl_attr_nest_end(nlh, proto);
		mnl_attr_nest_end(nlh, outer);
	};
	tuple(CTA_TUPLE_ORIG, 0xc6336402, 0xcb007102, 50000, 443); // 198.51.100.2 -> 203.0.113.2
	tuple(CTA_TUPLE_REPLY, 0xcb007102, 0xcb007101, 443, 40000); // back to 203.0.113.1:40000
	mnl_attr_put_u32(nlh, CTA_STATUS, htonl(IPS_SRC_NAT | IPS_CONFIRMED));
	if (state) {
		nlattr *info = mnl_attr_nest_start(nlh, CTA_PROTOINFO);
		nlattr *tcp = mnl_attr_nest_start(nlh, CTA_PROTOINFO_TCP);
		const uint8_t bytes[2] = {*state, 0};
		mnl_attr_put(nlh, CTA_PROTOINFO_TCP_STATE, stateBytes, bytes);
		mnl_attr_nest_end(nlh, tcp);
		mnl_attr_nest_end(nlh, info);
	}
	buffer.resize(nlh->nlmsg_len);
	return buffer;
}

} // namespace

TEST_CASE("the entry parser reads TCP's state from CTA_PROTOINFO, and refuses one of the wrong size")
{
	std::vector<uint8_t> bytes = entryMessage(TCP_CONNTRACK_TIME_WAIT);
	auto parsed = netlink::parseConntrackEntry(reinterpret_cast<const nlmsghdr *>(bytes.data()));
	REQUIRE(parsed);
	REQUIRE(*parsed);
	CHECK((*parsed)->tcpState == TCP_CONNTRACK_TIME_WAIT);
	CHECK(holdStateOf(**parsed) == HoldState::tcpTimeWait);
	CHECK((*parsed)->originalSource.toString() == "198.51.100.2");
	CHECK((*parsed)->translatedPort == 40000);

	bytes = entryMessage(std::nullopt);
	parsed = netlink::parseConntrackEntry(reinterpret_cast<const nlmsghdr *>(bytes.data()));
	REQUIRE(parsed);
	REQUIRE(*parsed);
	CHECK_FALSE((*parsed)->tcpState);
	CHECK(holdStateOf(**parsed) == HoldState::tcpOther);

	bytes = entryMessage(TCP_CONNTRACK_ESTABLISHED, 2);
	parsed = netlink::parseConntrackEntry(reinterpret_cast<const nlmsghdr *>(bytes.data()));
	REQUIRE_FALSE(parsed);
	CHECK_THAT(parsed.error().message, Catch::Contains("a TCP state of 2 bytes, not 1"));
}
