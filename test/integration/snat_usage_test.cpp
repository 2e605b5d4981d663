// SPDX-License-Identifier: Apache-2.0
// SNAT usage against real traffic (traffic_support.h: a pod, the node and an external host
// in namespaces of their own): connections held open toward one destination fill the
// agent's --to-ports range, the daemon's /metrics and /snat-usage and --snat-usage say how
// full, a range of three outputAddress addresses triples the destination's ports, past
// the last port the kernel refuses new connections (insert failures) while the agent
// reports the destination exhausted, and flows toward more destinations than the read keeps
// are counted but not attributed. IPv4 and IPv6.
#include <arpa/inet.h>
#include <fcntl.h>
#include <map>
#include <netinet/in.h>
#include <poll.h>
#include <regex>
#include <span>
#include <sstream>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include "ip-masq-agent/conntrack/conntrack_stats.h"
#include "ip-masq-agent/conntrack/snat_usage.h"
#include "ip-masq-agent/base/unique_fd.h"
#include "netns.h"
#include "traffic_support.h"

using namespace std::chrono_literals;
using namespace ipmasq;
using namespace ipmasq::test;

namespace {

constexpr uint16_t kPort = kSinkPort; // the external host's sinks
const std::string kHealth = "http://127.0.0.1:10263";
const std::string kToPorts = "--to-ports=40000-40099";
// A second destination on the external host, for IPv6 ("others stay low").
const std::string kOtherServerV6 = "2001:db8:2::3";

const std::string &server(int family)
{
	return family == AF_INET ? kServerV4 : kServerV6;
}

const std::string &otherServer(int family)
{
	return family == AF_INET ? kOtherServerV4 : kOtherServerV6;
}

// "203.0.113.2:9443" / "[2001:db8:2::2]:9443", as the metrics' destination label says it.
std::string endpoint(int family, const std::string &address, uint16_t port = kPort)
{
	return family == AF_INET ? fmt::format("{}:{}", address, port)
				 : fmt::format("[{}]:{}", address, port);
}

std::vector<UniqueFd> tcpConnections(const Netns &pod, int family, const std::string &address,
				     size_t count, const std::vector<std::string> &sources = {})
{
	std::vector<UniqueFd> fds;
	for (size_t i = 0; i < count; i++) {
		fds.push_back(tcpFrom(pod, family, address, 5s,
					 sources.empty() ? std::string() : sources[i % sources.size()]));
		INFO("connection " << i + 1 << " of " << count << " to " << address);
		REQUIRE(fds.back().isValid());
	}
	return fds;
}

// The value of the first sample of `metric` whose labels contain every one of `labels`.
std::optional<std::string> sampleWith(const std::string &text, const std::string &metric,
				      const std::vector<std::string> &labels)
{
	std::istringstream in(text);
	std::string line;
	while (std::getline(in, line)) {
		if (!line.starts_with(metric + "{"))
			continue;
		const size_t close = line.find("} ");
		if (close == std::string::npos)
			continue;
		const std::string labelText = line.substr(0, close);
		if (std::all_of(labels.begin(), labels.end(), [&](const std::string &label) {
			    return labelText.find(label) != std::string::npos;
		    }))
			return line.substr(close + 2);
	}
	return std::nullopt;
}

// Unix time now, as the agent stamps its reads (printed to the millisecond: the rounding).
double unixNow()
{
	return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
constexpr double kTimestampRounding = 0.001;

std::string familyLabel(int family)
{
	return family == AF_INET ? "family=\"ipv4\"" : "family=\"ipv6\"";
}

// The top ratio the daemon reports toward `address` over `protocol`.
std::optional<std::string> reportedRatio(const std::string &metrics, int family,
					 const std::string &address, const char *protocol)
{
	return sampleWith(metrics, "ip_masq_agent_snat_top_usage_ratio",
			  {familyLabel(family), fmt::format("protocol=\"{}\"", protocol),
			   fmt::format("destination=\"{}\"", endpoint(family, address))});
}

// --snat-usage with `args` (the config and flags of the agent), its standard output.
std::string snatUsageCommand(const std::string &args)
{
	std::string out;
	const int status = run(std::string(AGENT_BINARY) + " --snat-usage " + args + " 2>&1", &out);
	INFO(out);
	CHECK(status == 0);
	return out;
}

uint64_t insertFailures()
{
	auto stats = netlink::readConntrackStats();
	REQUIRE(stats);
	REQUIRE(stats->insertFailed);
	return *stats->insertFailed;
}

void prepareNode(const Topology &net)
{
	// Unreplied UDP flows live 30 s by default; this namespace's own setting.
	writeSysctl("net/netfilter/nf_conntrack_udp_timeout", "600");
	net.external.runOrFail(fmt::format("ip addr add {}/64 dev eth0 nodad", kOtherServerV6));
}

} // namespace

TEST_CASE("90 connections over 100 ports: the metric says 0.9 toward that destination, others stay low")
{
	if (run("command -v curl >/dev/null") != 0)
		FAIL("curl is needed for this test (apt-get install curl)");
	Topology net;
	prepareNode(net);
	TempDir dir;
	dir.write("config", "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
	Agent agent("nonMasqueradeCIDRs: [10.0.0.0/8]\n",
		    {kToPorts, "--enable-ipv6", "--health-addr=127.0.0.1:10263"});
	for (const int family : {AF_INET, AF_INET6}) {
		INFO((family == AF_INET ? "IPv4" : "IPv6"));
		const Sinks sinks = sinksOn(net.external, family);
		const double madeFrom = unixNow();
		std::vector<UniqueFd> held = tcpConnections(net.pod, family, server(family), 90);
		for (int i = 0; i < 90; i++)
			held.push_back(udpFrom(net.pod, family, server(family)));
		for (UniqueFd &fd : tcpConnections(net.pod, family, otherServer(family), 3))
			held.push_back(std::move(fd));

		// The daemon reads every 10 s: a minute is for a hung read only.
		std::string metrics;
		requireWithin(
			[&] {
				metrics = curlGet(kHealth + "/metrics");
				return reportedRatio(metrics, family, server(family), "tcp") == "0.9" &&
				       reportedRatio(metrics, family, server(family), "udp") == "0.9" &&
				       reportedRatio(metrics, family, otherServer(family), "tcp");
			},
			60s, agent.process(), "the daemon reports 0.9 toward the server",
			[&] { return metrics; });
		CHECK(reportedRatio(metrics, family, otherServer(family), "tcp") == "0.03");
		CHECK(sampleWith(metrics, "ip_masq_agent_snat_top_available_ports",
				 {familyLabel(family), "protocol=\"tcp\"", "ports=\"40000-40099\"",
				  fmt::format("destination=\"{}\"", endpoint(family, server(family)))}) == "100");
		CHECK_THAT(metrics, Catch::Contains("ip_masq_agent_snat_usage_max_ratio 0.9\n"));
		CHECK_THAT(metrics, Catch::Contains("ip_masq_agent_snat_other_connections 0\n"));
		// 183 connections toward three destinations (the server's TCP and UDP ports, the
		// other server's TCP port), each with its own count, none beyond the read's bound.
		CHECK_THAT(metrics, Catch::Contains("ip_masq_agent_snat_connections 183\n"));
		CHECK_THAT(metrics, Catch::Contains("ip_masq_agent_snat_destinations 3\n"));
		CHECK_THAT(metrics, Catch::Contains("ip_masq_agent_snat_unattributed_connections 0\n"));
		for (const auto &[address, protocol, connections] :
		     {std::tuple{server(family), "tcp", "90"}, std::tuple{server(family), "udp", "90"},
		      std::tuple{otherServer(family), "tcp", "3"}})
			CHECK(sampleWith(metrics, "ip_masq_agent_snat_top_connections",
					 {familyLabel(family), fmt::format("protocol=\"{}\"", protocol),
					  fmt::format("destination=\"{}\"", endpoint(family, address))}) == connections);
		// The last read came after they were made (it counted them), and before this scrape.
		const std::string lastRead = metricAt(kHealth, "ip_masq_agent_snat_last_read_timestamp_seconds");
		INFO("ip_masq_agent_snat_last_read_timestamp_seconds " << lastRead);
		const double readAt = lastRead.empty() ? 0 : std::stod(lastRead);
		CHECK(readAt >= madeFrom - kTimestampRounding);
		CHECK(readAt <= unixNow() + kTimestampRounding);

		// By hand: the same, from the config and the flags, as a table.
		const std::string table = snatUsageCommand("--config=" + dir.file("config") + " " +
							   kToPorts + " --enable-ipv6");
		const std::string node = family == AF_INET ? kNodeV4 : kNodeV6;
		CHECK(std::regex_search(table, std::regex(fmt::format(
			"  90\\.0% +90 +100  tcp +{} +{} +40000-40099\n",
			std::regex_replace(endpoint(family, server(family)), std::regex(R"([.\[\]])"), R"(\$&)"),
			std::regex_replace(node, std::regex(R"(\.)"), R"(\.)")))));
		CHECK_THAT(curlGet(kHealth + "/snat-usage"), Catch::Contains("90.0%"));
		// --explain adds the usage toward the address it explains.
		std::string explained;
		REQUIRE(run(std::string(AGENT_BINARY) + " --config=" + dir.file("config") + " " + kToPorts +
				    " --enable-ipv6 --explain=" + server(family) + " 2>/dev/null",
			    &explained) == 0);
		CHECK_THAT(explained, Catch::Contains(fmt::format(
			"; SNAT ports in use toward it now: tcp port {} from {}: 90 of 100 (90.0%)", kPort, node)));
		// The next family starts from an empty conntrack table (this namespace's only).
		held.clear();
		runOrFail("conntrack -F 2>/dev/null");
	}
}

TEST_CASE("outputAddress as a range of three addresses: three times the ports toward a destination")
{
	Topology net;
	prepareNode(net);
	net.external.runOrFail("ip route add 198.18.0.0/24 via 203.0.113.1 && "
			       "ip -6 route add 2001:db8:99::/64 via 2001:db8:2::1");
	// The kernel picks an address of the range by a hash of the client's and the
	// destination's addresses: twenty clients spread over it.
	std::vector<std::string> v4, v6;
	for (int i = 10; i < 30; i++) {
		v4.push_back(fmt::format("198.51.100.{}", i));
		v6.push_back(fmt::format("2001:db8:1::{:x}", i));
		net.pod.runOrFail(fmt::format("ip addr add {}/24 dev eth0 && ip addr add {}/64 dev eth0 nodad",
					      v4.back(), v6.back()));
	}
	const std::string config = "outputAddress: 198.18.0.7-198.18.0.9\n"
				   "outputAddressIPv6: \"2001:db8:99::7-2001:db8:99::9\"\n";
	TempDir dir;
	dir.write("config", config);
	Agent agent(config, {kToPorts, "--enable-ipv6"});
	for (const auto &[family, sources] : {std::pair{AF_INET, &v4}, std::pair{AF_INET6, &v6}}) {
		INFO((family == AF_INET ? "IPv4" : "IPv6"));
		const Sinks sinks = sinksOn(net.external, family);
		const std::vector<UniqueFd> held = tcpConnections(net.pod, family, server(family), 90, *sources);
		const std::string table = snatUsageCommand("--config=" + dir.file("config") + " " +
							   kToPorts + " --enable-ipv6");
		// Each address has its own 100 ports; the destination has 300 over the three.
		CHECK(std::regex_search(table, std::regex(fmt::format(
			"tcp {} over the agent's 3 addresses: 90 connections from [123] of them, 300 "
			"ports in all \\(30\\.0%\\)",
			std::regex_replace(endpoint(family, server(family)), std::regex(R"([.\[\]])"), R"(\$&)")))));
		size_t rows = 0;
		for (const char *address : {"198.18.0.7 ", "198.18.0.8 ", "198.18.0.9 "})
			rows += table.find(family == AF_INET ? address
							     : std::regex_replace(address, std::regex("198\\.18\\.0\\."),
										  "2001:db8:99::")) != std::string::npos;
		INFO(table);
		CHECK(rows >= 2); // twenty clients reach more than one address of three
		CHECK(std::regex_search(table, std::regex(" 100  tcp ")));
		runOrFail("conntrack -F 2>/dev/null");
	}
}

TEST_CASE("past the last port the kernel refuses new connections, and the agent says exhausted")
{
	if (run("command -v curl >/dev/null") != 0)
		FAIL("curl is needed for this test (apt-get install curl)");
	Topology net;
	prepareNode(net);
	Agent agent("nonMasqueradeCIDRs: [10.0.0.0/8]\n",
		    {kToPorts, "--enable-ipv6", "--health-addr=127.0.0.1:10263"});
	for (const int family : {AF_INET, AF_INET6}) {
		INFO((family == AF_INET ? "IPv4" : "IPv6"));
		const Sinks sinks = sinksOn(net.external, family);
		const std::vector<UniqueFd> held = tcpConnections(net.pod, family, server(family), 100);
		const uint64_t failedBefore = insertFailures();
		// Five more: none gets through (each SYN, retransmissions included, is dropped
		// when its entry cannot be inserted).
		for (int i = 0; i < 5; i++)
			CHECK_FALSE(tcpFrom(net.pod, family, server(family), 1500ms).isValid());
		CHECK(insertFailures() >= failedBefore + 5);

		std::string metrics;
		requireWithin(
			[&] {
				metrics = curlGet(kHealth + "/metrics");
				return reportedRatio(metrics, family, server(family), "tcp") == "1";
			},
			60s, agent.process(), "the daemon reports the destination exhausted",
			[&] { return metrics; });
		CHECK_THAT(metrics, Catch::Contains(
			"ip_masq_agent_snat_destinations_over_threshold{threshold=\"1\"} 1\n"));
		CHECK_THAT(metrics, Catch::Contains("ip_masq_agent_snat_usage_max_ratio 1\n"));
		CHECK_THAT(curlGet(kHealth + "/snat-usage"), Catch::Contains("1 exhausted"));
		runOrFail("conntrack -F 2>/dev/null"); // the next family starts afresh
	}
}

namespace {

// This node's count of conntrack entries (this namespace's, where the pod's flows are tracked).
uint64_t trackedEntries()
{
	auto stats = netlink::readConntrackStats();
	REQUIRE(stats);
	REQUIRE(stats->entries);
	return *stats->entries;
}

struct UdpDestination {
	std::string address;
	uint16_t port;
};

// One datagram from one UDP socket of the pod to each of `destinations`: one flow each. Sent
// in batches, each given time to be tracked, so that the veth's backlog never overflows; a
// flow sent twice is the same entry, so a batch that was not all tracked is sent again.
void udpFlowsFromPod(const Topology &net, const std::vector<UdpDestination> &destinations)
{
	const UniqueFd fd(inNetns(net.pod.fd(), [] { return socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0); }));
	REQUIRE(fd.isValid());
	constexpr size_t kBatch = 256;
	const uint64_t before = trackedEntries();
	for (size_t from = 0; from < destinations.size(); from += kBatch) {
		const std::span batch(destinations.begin() + long(from),
				      std::min(kBatch, destinations.size() - from));
		for (int attempt = 0; attempt < 5; attempt++) {
			for (const UdpDestination &d : batch) {
				const sockaddr_storage to = socketAddress(AF_INET, d.address, d.port);
				(void)sendto(fd.get(), "x", 1, 0, reinterpret_cast<const sockaddr *>(&to),
					     lengthOf(AF_INET));
			}
			if (waitFor([&] { return trackedEntries() >= before + from + batch.size(); }, 5s))
				break;
		}
	}
}

// The pod's UDP flows conntrack holds now (`conntrack -L` says how many it listed).
size_t podUdpFlows()
{
	std::string out;
	(void)run(fmt::format("conntrack -L -p udp -s {} 2>&1 >/dev/null", kPodV4), &out);
	std::smatch m;
	return std::regex_search(out, m, std::regex(R"((\d+) flow entries have been shown)")) ? std::stoul(m[1]) : 0;
}

} // namespace

TEST_CASE("past the read's bound of destinations, connections are counted and not attributed")
{
	if (run("command -v curl >/dev/null") != 0)
		FAIL("curl is needed for this test (apt-get install curl)");
	Topology net;
	prepareNode(net);
	Agent agent("nonMasqueradeCIDRs: [10.0.0.0/8]\n", {"--health-addr=127.0.0.1:10263"});
	// Every port of the server and ten of the other server's: ten destinations more than the
	// daemon's read keeps, one masqueraded UDP flow each.
	const size_t bound = SnatUsageCounter::Limits{}.maxDestinations;
	std::vector<UdpDestination> destinations;
	for (uint32_t port = 1; port <= 65535; port++)
		destinations.push_back({kServerV4, uint16_t(port)});
	for (uint16_t port = 1; destinations.size() < bound + 10; port++)
		destinations.push_back({kOtherServerV4, port});
	udpFlowsFromPod(net, destinations);
	INFO("the pod's UDP flows tracked: " << podUdpFlows());
	REQUIRE(podUdpFlows() == destinations.size());
	const double allTracked = unixNow();

	// The daemon reads every 10 s, or less often when a read costs more (60 times its CPU
	// time): three minutes is for a hung read only. A read stamped after every flow was
	// tracked counted them all.
	std::string metrics;
	requireWithin(
		[&] {
			const std::string lastRead = metricAt(kHealth, "ip_masq_agent_snat_last_read_timestamp_seconds");
			if (lastRead.empty() || std::stod(lastRead) < allTracked)
				return false;
			metrics = curlGet(kHealth + "/metrics");
			return true;
		},
		180s, agent.process(), "a read of conntrack after every flow was tracked", [&] { return metrics; });
	CHECK_THAT(metrics, Catch::Contains(fmt::format("ip_masq_agent_snat_connections {}\n", bound + 10)));
	CHECK_THAT(metrics, Catch::Contains(fmt::format("ip_masq_agent_snat_destinations {}\n", bound)));
	CHECK_THAT(metrics, Catch::Contains("ip_masq_agent_snat_unattributed_connections 10\n"));
	CHECK_THAT(curlGet(kHealth + "/snat-usage"),
		   Catch::Contains(fmt::format("Incomplete: 10 connections toward destinations beyond the first {} "
					       "were counted but not attributed.", bound)));
	runOrFail("conntrack -F 2>/dev/null");
}

namespace {

// One client's row under a destination in the "Who holds the ports" part of the table.
struct HolderRow {
	std::string share;
	uint64_t held = 0, open = 0, timeWait = 0, other = 0; // TCP's states; UDP's all in held
	std::string client, reachedThrough;
	bool operator==(const HolderRow &) const = default;
};

std::ostream &operator<<(std::ostream &out, const HolderRow &r)
{
	return out << r.share << " " << r.held << " " << r.open << "/" << r.timeWait << "/" << r.other
		   << " " << r.client << " [" << r.reachedThrough << "]";
}

// The rows under the line that starts with `heading` ("tcp 203.0.113.2:9443, "): after its
// column header, every line that starts with a share, as far as the next other line.
std::vector<HolderRow> holderRows(const std::string &table, const std::string &heading, bool tcp)
{
	std::istringstream in(table);
	std::string line;
	while (std::getline(in, line) && !line.starts_with(heading)) {
	}
	std::vector<HolderRow> rows;
	if (!in || !std::getline(in, line)) // the column header
		return rows;
	const std::regex tcpRow(R"(^\s*([\d.]+%)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(.*)$)");
	const std::regex otherRow(R"(^\s*([\d.]+%)\s+(\d+)\s+(\S+)\s+(.*)$)");
	std::smatch m;
	while (std::getline(in, line)) {
		HolderRow row;
		if (tcp && std::regex_match(line, m, tcpRow))
			row = {m[1], std::stoull(m[2]), std::stoull(m[3]), std::stoull(m[4]), std::stoull(m[5]),
			       m[6], m[7]};
		else if (!tcp && std::regex_match(line, m, otherRow))
			row = {m[1], std::stoull(m[2]), 0, 0, 0, m[3], m[4]};
		else
			break;
		rows.push_back(row);
	}
	return rows;
}

// What `conntrack -L` itself lists toward `destination` port kPort over `protocol`, by
// original source: held, and TCP's by state (open: SYN_SENT, SYN_RECV, ESTABLISHED).
std::map<std::string, HolderRow> conntrackListing(const char *protocol, const std::string &destination)
{
	std::string out;
	REQUIRE(run(fmt::format("conntrack -L -p {} -d {} --dport {} 2>/dev/null", protocol, destination,
				kPort),
		    &out) == 0);
	std::map<std::string, HolderRow> bySource;
	std::istringstream in(out);
	std::string line;
	const std::regex source(R"(src=(\S+))");
	std::smatch m;
	while (std::getline(in, line)) {
		if (!std::regex_search(line, m, source))
			continue;
		HolderRow &row = bySource[m[1]];
		row.client = m[1];
		row.held++;
		if (std::string_view(protocol) != "tcp")
			continue;
		std::istringstream words(line);
		std::string word, state;
		for (int i = 0; i < 4 && words >> word; i++)
			state = word; // "tcp 6 599 TIME_WAIT src=..."
		if (state == "ESTABLISHED" || state == "SYN_SENT" || state == "SYN_RECV")
			row.open++;
		else if (state == "TIME_WAIT")
			row.timeWait++;
		else
			row.other++;
	}
	return bySource;
}

// The agent's rows say what conntrack lists: the same clients with the same counts.
void requireSameAsConntrack(const std::vector<HolderRow> &rows, const char *protocol,
			    const std::string &destination)
{
	const std::map<std::string, HolderRow> listed = conntrackListing(protocol, destination);
	REQUIRE(rows.size() == listed.size());
	for (const HolderRow &row : rows) {
		INFO(row);
		const auto it = listed.find(row.client);
		REQUIRE(it != listed.end());
		CHECK(it->second.held == row.held);
		CHECK(it->second.open == row.open);
		CHECK(it->second.timeWait == row.timeWait);
		CHECK(it->second.other == row.other);
	}
}

// Accepts connections on the external host's listener until `count` are accepted.
std::vector<UniqueFd> acceptAll(const Sinks &sinks, size_t count)
{
	std::vector<UniqueFd> accepted;
	const auto deadline = std::chrono::steady_clock::now() + 20s;
	while (accepted.size() < count && std::chrono::steady_clock::now() < deadline) {
		pollfd p{sinks.tcp.get(), POLLIN, 0};
		if (poll(&p, 1, 1000) == 1)
			accepted.emplace_back(accept4(sinks.tcp.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
	}
	REQUIRE(accepted.size() == count);
	return accepted;
}

// The server's ends of the connections the client closed: each read sees the end of its
// stream and closes, so that conntrack sees both FINs and the last ACK (TIME_WAIT).
void closeWhereClientClosed(std::vector<UniqueFd> &accepted, size_t expected)
{
	size_t closed = 0;
	const auto deadline = std::chrono::steady_clock::now() + 20s;
	while (closed < expected && std::chrono::steady_clock::now() < deadline) {
		std::vector<pollfd> polls;
		for (const UniqueFd &fd : accepted)
			if (fd.isValid())
				polls.push_back({fd.get(), POLLIN, 0});
		if (poll(polls.data(), polls.size(), 1000) <= 0)
			continue;
		for (UniqueFd &fd : accepted) {
			char byte;
			if (fd.isValid() && read(fd.get(), &byte, 1) == 0) {
				fd = UniqueFd();
				closed++;
			}
		}
	}
	REQUIRE(closed == expected);
}

// Entries conntrack lists toward the server's TCP port in `state`.
size_t entriesIn(const char *state)
{
	std::string out;
	(void)run(fmt::format("conntrack -L -p tcp -d {} --dport {} --state {} 2>/dev/null | wc -l", kServerV4,
			      kPort, state),
		  &out);
	return out.empty() ? 0 : std::stoul(out);
}

// The daemon's first read stamped at or after `since`, then its /snat-usage and /metrics.
std::pair<std::string, std::string> readAfter(const Agent &agent, double since)
{
	std::string table, metrics;
	requireWithin(
		[&] {
			const std::string lastRead = metricAt(kHealth, "ip_masq_agent_snat_last_read_timestamp_seconds");
			if (lastRead.empty() || std::stod(lastRead) < since)
				return false;
			table = curlGet(kHealth + "/snat-usage");
			metrics = curlGet(kHealth + "/metrics");
			return true;
		},
		60s, agent.process(), "a read of conntrack after the connections were made", [&] { return table; });
	return {table, metrics};
}

// A bridge in the node, as a bridge CNI makes one, with one pod behind its port veth-b.
struct BridgedPod {
	Netns pod;

	BridgedPod()
	{
		remove();
		runOrFail("ip link add br-pods type bridge && ip link set br-pods up && "
			  "ip addr add 198.18.5.1/24 dev br-pods && "
			  "ip link add veth-b type veth peer name eth0 netns " + pod.path() + " && "
			  "ip link set veth-b master br-pods && ip link set veth-b up");
		pod.runOrFail("ip link set lo up && ip addr add 198.18.5.2/24 dev eth0 && "
			      "ip link set eth0 up && ip route add default via 198.18.5.1");
	}
	~BridgedPod() { remove(); }
	BridgedPod(const BridgedPod &) = delete;
	BridgedPod &operator=(const BridgedPod &) = delete;

	static void remove() { (void)run("ip link del veth-b 2>/dev/null; ip link del br-pods 2>/dev/null"); }
};

} // namespace

TEST_CASE("who holds the ports: two pods toward one destination, ranked, TCP by state, as conntrack lists them")
{
	if (run("command -v curl >/dev/null") != 0)
		FAIL("curl is needed for this test (apt-get install curl)");
	Topology net;
	prepareNode(net);
	// This namespace's own: the closed connections stay in TIME_WAIT for the whole test.
	writeSysctl("net/netfilter/nf_conntrack_tcp_timeout_time_wait", "600");
	const BridgedPod bridged;
	const std::string ports = "--to-ports=40000-40299";
	TempDir dir;
	dir.write("config", "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
	Agent agent("nonMasqueradeCIDRs: [10.0.0.0/8]\n", {ports, "--health-addr=127.0.0.1:10263"});
	const Sinks sinks = sinksOn(net.external, AF_INET);

	// The first pod (routed through to-pod, as Calico routes each pod through its veth):
	// 200 connections, 80 of them closed by both ends; the second (behind the bridge): 15.
	std::vector<UniqueFd> first = tcpConnections(net.pod, AF_INET, kServerV4, 200);
	const std::vector<UniqueFd> second = tcpConnections(bridged.pod, AF_INET, kServerV4, 15);
	std::vector<UniqueFd> accepted = acceptAll(sinks, 215);
	first.resize(120);
	closeWhereClientClosed(accepted, 80);
	requireWithin([] { return entriesIn("TIME_WAIT") == 80; }, 20s, agent.process(),
		      "conntrack lists the 80 closed connections in TIME_WAIT",
		      [] { return std::to_string(entriesIn("TIME_WAIT")); });
	// UDP: 3 flows from the first pod, 7 from the second.
	std::vector<UniqueFd> flows;
	for (int i = 0; i < 3; i++)
		flows.push_back(udpFrom(net.pod, AF_INET, kServerV4));
	for (int i = 0; i < 7; i++)
		flows.push_back(udpFrom(bridged.pod, AF_INET, kServerV4));
	const double made = unixNow();

	const std::vector<HolderRow> tcpExpected{
		{"66.7%", 200, 120, 80, 0, kPodV4, "to-pod"},
		{"5.0%", 15, 15, 0, 0, "198.18.5.2", "veth-b (port of br-pods)"},
	};
	const std::vector<HolderRow> udpExpected{
		{"2.3%", 7, 0, 0, 0, "198.18.5.2", "veth-b (port of br-pods)"},
		{"1.0%", 3, 0, 0, 0, kPodV4, "to-pod"},
	};
	const auto requireHolders = [&](const std::string &table) {
		INFO(table);
		CHECK_THAT(table, Catch::Contains(fmt::format("tcp {}, translated to 203.0.113.1 (300 ports): 215 connections from 2 clients",
							      endpoint(AF_INET, kServerV4))));
		CHECK_THAT(table, Catch::Contains(fmt::format("udp {}, translated to 203.0.113.1 (300 ports): 10 connections from 2 clients",
							      endpoint(AF_INET, kServerV4))));
		const std::vector<HolderRow> tcpRows =
			holderRows(table, fmt::format("tcp {}, ", endpoint(AF_INET, kServerV4)), true);
		CHECK(tcpRows == tcpExpected);
		requireSameAsConntrack(tcpRows, "tcp", kServerV4);
		const std::vector<HolderRow> udpRows =
			holderRows(table, fmt::format("udp {}, ", endpoint(AF_INET, kServerV4)), false);
		CHECK(udpRows == udpExpected);
		requireSameAsConntrack(udpRows, "udp", kServerV4);
		CHECK_FALSE(std::regex_search(table, std::regex("more with|whose client")));
	};
	// By hand, and from the daemon's last read.
	requireHolders(snatUsageCommand("--config=" + dir.file("config") + " " + ports));
	const auto [table, metrics] = readAfter(agent, made);
	requireHolders(table);

	// The metrics: the destination's rank, the clients' ranks, TCP's states.
	const std::string destination = fmt::format("destination=\"{}\"", endpoint(AF_INET, kServerV4));
	const auto connections = [&](const char *protocol, const std::string &client, const char *state) {
		return sampleWith(metrics, "ip_masq_agent_snat_top_client_connections",
				  {fmt::format("protocol=\"{}\"", protocol), destination,
				   fmt::format("client=\"{}\"", client), fmt::format("state=\"{}\"", state)});
	};
	CHECK(sampleWith(metrics, "ip_masq_agent_snat_top_client_connections",
			 {"rank=\"1\"", "client_rank=\"1\"", "protocol=\"tcp\"", destination, "ports=\"40000-40299\"",
			  "source=\"203.0.113.1\"", "client=\"198.51.100.2\"", "interface=\"to-pod\"",
			  "state=\"tcp_open\""}) == "120");
	CHECK(connections("tcp", kPodV4, "tcp_time_wait") == "80");
	CHECK(connections("tcp", kPodV4, "tcp_other") == "0");
	CHECK(sampleWith(metrics, "ip_masq_agent_snat_top_client_connections",
			 {"rank=\"1\"", "client_rank=\"2\"", "client=\"198.18.5.2\"", "interface=\"veth-b\"",
			  "state=\"tcp_open\""}) == "15");
	CHECK(sampleWith(metrics, "ip_masq_agent_snat_top_client_connections",
			 {"rank=\"2\"", "client_rank=\"1\"", "protocol=\"udp\"", "client=\"198.18.5.2\"",
			  "state=\"not_tcp\""}) == "7");
	CHECK(connections("udp", kPodV4, "not_tcp") == "3");
	CHECK_FALSE(connections("udp", kPodV4, "tcp_open"));
	CHECK(sampleWith(metrics, "ip_masq_agent_snat_top_client_usage_ratio",
			 {"protocol=\"tcp\"", "client=\"198.51.100.2\""}) == fmt::format("{}", 200.0 / 300));
	CHECK(sampleWith(metrics, "ip_masq_agent_snat_top_clients", {"rank=\"1\"", destination}) == "2");
	CHECK(sampleWith(metrics, "ip_masq_agent_snat_top_clients_left_out", {"rank=\"1\""}) == "0");
	CHECK(sampleWith(metrics, "ip_masq_agent_snat_top_clients_left_out_connections", {"rank=\"2\""}) == "0");
	// Prometheus's own linter reads the client series as it reads the rest.
	std::string lint;
	const int linted = run(fmt::format("curl -sS --max-time 5 {}/metrics | promtool check metrics", kHealth),
			       &lint, true);
	INFO("promtool: " << lint);
	CHECK(linted == 0);
	CHECK(lint.empty());
	runOrFail("conntrack -F 2>/dev/null");
}

TEST_CASE("300 clients toward one destination: 10 in the table and the series, the other 290 counted")
{
	if (run("command -v curl >/dev/null") != 0)
		FAIL("curl is needed for this test (apt-get install curl)");
	Topology net;
	prepareNode(net);
	// 300 addresses on the pod's interface, routed to it by the node.
	runOrFail("ip route add 198.18.0.0/23 dev to-pod");
	net.pod.runOrFail("for i in $(seq 1 300); do ip addr add 198.18.$((i / 200)).$((1 + i % 200))/23 "
			  "dev eth0 || exit 1; done");
	std::vector<std::string> sources;
	for (int i = 1; i <= 300; i++)
		sources.push_back(fmt::format("198.18.{}.{}", i / 200, 1 + i % 200));
	TempDir dir;
	dir.write("config", "nonMasqueradeCIDRs: [10.0.0.0/8]\n");
	Agent agent("nonMasqueradeCIDRs: [10.0.0.0/8]\n", {"--health-addr=127.0.0.1:10263"});
	const Sinks sinks = sinksOn(net.external, AF_INET);
	const std::vector<UniqueFd> held = tcpConnections(net.pod, AF_INET, kServerV4, 300, sources);
	const double made = unixNow();

	const auto requireBounded = [&](const std::string &table) {
		INFO(table);
		CHECK_THAT(table, Catch::Contains(fmt::format("tcp {}, translated to 203.0.113.1 (64512 ports): 300 connections from 300 clients",
							      endpoint(AF_INET, kServerV4))));
		const std::vector<HolderRow> rows = holderRows(table, fmt::format("tcp {}, ", endpoint(AF_INET, kServerV4)), true);
		REQUIRE(rows.size() == 10);
		// One connection each: the addresses break the tie, in order.
		std::vector<std::string> ordered = sources;
		std::sort(ordered.begin(), ordered.end(), [](const std::string &a, const std::string &b) {
			return *parseAddress(a) < *parseAddress(b);
		});
		for (size_t i = 0; i < rows.size(); i++) {
			CHECK(rows[i].client == ordered[i]);
			CHECK(rows[i].held == 1);
			CHECK(rows[i].open == 1);
			CHECK(rows[i].reachedThrough == "to-pod");
		}
		CHECK_THAT(table, Catch::Contains("and 290 more clients with 290 connections, left out (at most 10 shown)"));
	};
	requireBounded(snatUsageCommand("--config=" + dir.file("config")));
	const auto [table, metrics] = readAfter(agent, made);
	requireBounded(table);
	// The series stay within their bounds: 10 clients, TCP's three states each.
	const auto count = [&](const std::string &prefix) {
		size_t n = 0;
		for (size_t at = metrics.find("\n" + prefix); at != std::string::npos; at = metrics.find("\n" + prefix, at + 1))
			n++;
		return n;
	};
	CHECK(count("ip_masq_agent_snat_top_client_connections{") == 30);
	CHECK(count("ip_masq_agent_snat_top_client_usage_ratio{") == 10);
	const std::string destination = fmt::format("destination=\"{}\"", endpoint(AF_INET, kServerV4));
	CHECK(sampleWith(metrics, "ip_masq_agent_snat_top_clients", {"rank=\"1\"", destination}) == "300");
	CHECK(sampleWith(metrics, "ip_masq_agent_snat_top_clients_left_out", {"rank=\"1\"", destination}) == "290");
	CHECK(sampleWith(metrics, "ip_masq_agent_snat_top_clients_left_out_connections", {"rank=\"1\"", destination}) ==
	      "290");
	CHECK_THAT(metrics, Catch::Contains("ip_masq_agent_snat_unattributed_client_connections 0\n"));
	runOrFail("conntrack -F 2>/dev/null");
}
