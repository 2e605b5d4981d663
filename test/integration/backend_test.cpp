// SPDX-License-Identifier: Apache-2.0
// The netlink backend against the real kernel, in this process's private network namespace.
#include <catch2/catch.hpp>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <netinet/in.h>
#include <regex>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <linux/capability.h>
#include <linux/netlink.h>

#include "ip-masq-agent/model/element_diff.h"
#include "ip-masq-agent/nft/backend.h"
#include "ip-masq-agent/nft/table_batch.h"
#include "ip-masq-agent/nft/objects.h"
#include "ip-masq-agent/nft/replacement.h"
#include "ip-masq-agent/nft/table_read.h"
#include "ip-masq-agent/netlink/socket.h"
#include "ip-masq-agent/nft/nft_text.h"
#include "ip-masq-agent/model/ruleset.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"
#include "../common/kernel_table.h"
#include "../common/ruleset_cases.h"
#include "backend_support.h"
#include "netns.h"

using namespace ipmasq;
using ipmasq::test::run;
using ipmasq::test::freshBackend;
using ipmasq::test::runOrFail;

namespace {

const std::string kListTable = "nft list table inet ip-masq-agent";


Config configWith(const std::vector<std::string> &cidrs)
{
	Config config;
	for (const std::string &text : cidrs) {
		auto prefix = parsePrefix(text);
		INFO(text);
		REQUIRE(prefix);
		config.nonMasqueradeCIDRs.push_back(*prefix);
	}
	return config;
}

bool tableExists(const std::string &table = "ip-masq-agent")
{
	return run("nft list table inet " + table + " >/dev/null 2>&1") == 0;
}

// A file for `nft -f`, removed when the test is done with it.
class TempFile
{
public:
	explicit TempFile(const std::string &content)
	{
		char name[] = "/tmp/ip-masq-agent-test-XXXXXX";
		const int fd = mkstemp(name);
		REQUIRE(fd >= 0);
		close(fd);
		path_ = name;
		std::ofstream(path_) << content;
	}
	~TempFile() { std::remove(path_.c_str()); }
	const std::string &path() const { return path_; }

private:
	std::string path_;
};

void requireApplied(NetlinkBackend &backend, const Ruleset &ruleset)
{
	auto applied = backend.apply(ruleset);
	INFO((applied ? "" : applied.error().message));
	REQUIRE(applied);
}

bool matches(NetlinkBackend &backend, const Ruleset &ruleset)
{
	auto result = backend.matches(ruleset);
	INFO((result ? "" : result.error().message));
	REQUIRE(result);
	return *result;
}

// Number of entries in the "elem" array of `nft -j list set`: counts the commas at
// the array's top level, outside strings.
size_t jsonElementCount(const std::string &json)
{
	const size_t start = json.find("\"elem\":");
	if (start == std::string::npos)
		return 0;
	size_t i = json.find('[', start);
	REQUIRE(i != std::string::npos);
	int depth = 0;
	size_t count = 0;
	bool inString = false, any = false;
	for (; i < json.size(); i++) {
		const char c = json[i];
		if (inString) {
			if (c == '\\')
				i++;
			else if (c == '"')
				inString = false;
			continue;
		}
		if (c == '"') {
			inString = true;
		} else if (c == '[' || c == '{') {
			depth++;
		} else if (c == ']' || c == '}') {
			if (--depth == 0)
				break;
		} else if (c == ',' && depth == 1) {
			count++;
		}
		if (depth >= 1 && c != '[' && !std::isspace(static_cast<unsigned char>(c)))
			any = true;
	}
	return any ? count + 1 : 0;
}

// The parity check: the backend's table and the one `nft -f` makes of the dry-run
// script list identically, and matches() accepts both.
void requireParity(const std::string &name, const Ruleset &ruleset)
{
	INFO("config: " << name);
	auto backend = freshBackend();

	requireApplied(*backend, ruleset);
	const std::string viaNetlink = runOrFail(kListTable);
	REQUIRE(matches(*backend, ruleset));
	CHECK(viaNetlink.find("unknown") == std::string::npos);
	CHECK(viaNetlink.find("[invalid") == std::string::npos);

	REQUIRE(backend->remove(ruleset.table));
	REQUIRE_FALSE(tableExists());

	const auto rendered = renderNftScript(ruleset);
	REQUIRE(rendered);
	TempFile script(*rendered);
	runOrFail("nft -f " + script.path());
	const std::string viaNft = runOrFail(kListTable);

	REQUIRE(viaNetlink == viaNft);
	// The kernel's dump of nft's table is canonically the same as our desired objects.
	REQUIRE(matches(*backend, ruleset));
}

} // namespace

TEST_CASE("every named config (the golden cases): the backend lists exactly like nft -f, "
	  "and the kernel's sets map back to the same ruleset")
{
	for (const test::RulesetCase &c : test::rulesetCases()) {
		auto built = test::buildCaseWithOptions(c);
		INFO("case " << c.name);
		REQUIRE(built);
		if (built->ruleset.table != kDefaultTableName)
			continue; // requireParity lists the default table only (kListTable)
		requireParity(c.name, built->ruleset);
		// The reverse mapping (adoption's) over the table as the kernel holds it.
		auto backend = NetlinkBackend::open();
		REQUIRE(backend);
		auto read = (*backend)->readTable(built->ruleset.table);
		REQUIRE(read);
		REQUIRE(*read);
		CHECK(**read == test::kernelTableOf(built->ruleset));
		CHECK(rulesetFromKernel(built->options, **read) ==
		      (c.adoptable ? std::optional(built->ruleset) : std::nullopt));
	}
}

TEST_CASE("apply creates, replaces and remove deletes the table, touching nothing else")
{
	auto backend = freshBackend();
	runOrFail("nft add table inet other");
	runOrFail("nft add chain inet other input '{ type filter hook input priority 0; }'");
	runOrFail("nft add rule inet other input tcp dport 22 accept");
	const std::string other = runOrFail("nft list table inet other");

	RulesetOptions options;
	const Ruleset first = buildRuleset(configWith({"10.0.0.0/8", "192.168.0.0/16"}), options);
	requireApplied(*backend, first);
	const std::string listed = runOrFail(kListTable);
	CHECK(listed.find("10.0.0.0/8") != std::string::npos);
	CHECK(listed.find("192.168.0.0/16") != std::string::npos);
	CHECK(runOrFail("nft list table inet other") == other);

	options.enableIpv6 = true;
	options.randomFully = false;
	const Ruleset second = buildRuleset(configWith({"172.16.0.0/12", "fd00::/8"}), options);
	requireApplied(*backend, second);
	const std::string replaced = runOrFail(kListTable);
	CHECK(replaced.find("10.0.0.0/8") == std::string::npos);
	CHECK(replaced.find("172.16.0.0/12") != std::string::npos);
	CHECK(replaced.find("fd00::/8") != std::string::npos);
	CHECK(replaced.find("fully-random") == std::string::npos);
	CHECK(matches(*backend, second));
	CHECK_FALSE(matches(*backend, first));
	CHECK(runOrFail("nft list table inet other") == other);

	REQUIRE(backend->remove(second.table));
	CHECK_FALSE(tableExists());
	CHECK(runOrFail("nft list table inet other") == other);

	// Removing a table that is not there is not an error.
	REQUIRE(backend->remove(second.table));
	CHECK(runOrFail("nft list table inet other") == other);
}

TEST_CASE("the backend's table lists exactly like nft -f of the dry-run script")
{
	RulesetOptions defaults;

	requireParity("defaults", buildRuleset(defaultConfig({}), defaults));
	requireParity("--nomasq-all-reserved-ranges defaults",
		      buildRuleset(defaultConfig({true, false}), defaults));

	RulesetOptions ipv6 = defaults;
	ipv6.enableIpv6 = true;
	requireParity("IPv6 enabled",
		      buildRuleset(configWith({"10.0.0.0/8", "2001:db8::/32", "fd00::/8"}), ipv6));

	Config linkLocal = configWith({"10.0.0.0/8", "2001:db8::/32"});
	linkLocal.masqLinkLocal = true;
	requireParity("masqLinkLocal on", buildRuleset(linkLocal, ipv6));
	linkLocal.masqLinkLocalIPv6 = true;
	requireParity("masqLinkLocal and masqLinkLocalIPv6 on", buildRuleset(linkLocal, ipv6));
	linkLocal.masqLinkLocal = false;
	requireParity("masqLinkLocalIPv6 on only", buildRuleset(linkLocal, ipv6));

	RulesetOptions notRandom = defaults;
	notRandom.randomFully = false;
	requireParity("randomFully off", buildRuleset(defaultConfig({}), notRandom));

	RulesetOptions ports = defaults;
	ports.toPorts = {PortRange{1024, 65535}};
	requireParity("toPorts one range", buildRuleset(defaultConfig({}), ports));
	ports.toPorts = {PortRange{1024, 29999}, PortRange{32768, 60999}, PortRange{61500, 61500}};
	requireParity("toPorts several ranges", buildRuleset(defaultConfig({}), ports));
	ports.toPorts = {PortRange{8080, 8080}};
	ports.randomFully = false;
	requireParity("toPorts one port, not fully random", buildRuleset(defaultConfig({}), ports));

	// Interval edge cases: a range from address 0 (no leading end element), ranges to
	// the top address (no end element, the open-interval flag instead), everything.
	requireParity("ranges touching both ends",
		      buildRuleset(configWith({"0.0.0.0/8", "10.0.0.0/8", "240.0.0.0/4",
					       "192.0.2.1/32", "::/3", "ff00::/8"}),
				   ipv6));
	requireParity("everything", buildRuleset(configWith({"0.0.0.0/0", "::/0"}), ipv6));
	requireParity("only the top address",
		      buildRuleset(configWith({"255.255.255.255/32", "ffff:ffff:ffff:ffff:ffff:"
						"ffff:ffff:ffff/128"}),
				   ipv6));

	Config large;
	for (int i = 0; i < 10000; i++) { // /30s with gaps: no two of them merge
		const auto text = fmt::format("10.{}.{}.{}/30", i >> 12, (i >> 4) & 255, (i & 15) * 16);
		large.nonMasqueradeCIDRs.push_back(parsePrefix(text).value());
	}
	for (int i = 0; i < 500; i++)
		large.nonMasqueradeCIDRs.push_back(
			parsePrefix(fmt::format("2001:db8:{:x}::/48", i * 2)).value());
	requireParity("10,000 IPv4 and 500 IPv6 CIDRs", buildRuleset(large, ipv6));
}

TEST_CASE("100,000 CIDRs go in one transaction")
{
	auto backend = freshBackend();
	Config config;
	for (int i = 0; i < 60000; i++) { // /32s with a gap between each two
		const auto text = fmt::format("10.{}.{}.{}/32", i >> 15, (i >> 7) & 255, (i & 127) * 2);
		config.nonMasqueradeCIDRs.push_back(parsePrefix(text).value());
	}
	for (int i = 0; i < 40000; i++) {
		const auto text = fmt::format("2001:db8:{:x}:{:x}::/64", i >> 15, (i & 0x7fff) * 2);
		config.nonMasqueradeCIDRs.push_back(parsePrefix(text).value());
	}
	RulesetOptions options;
	options.enableIpv6 = true;
	const Ruleset ruleset = buildRuleset(config, options);
	REQUIRE(ruleset.findSet(Family::ipv4)->elements.size() == 60001); // + link-local
	REQUIRE(ruleset.findSet(Family::ipv6)->elements.size() == 40001);

	auto before = backend->generation();
	REQUIRE(before);
	requireApplied(*backend, ruleset);
	auto after = backend->generation();
	REQUIRE(after);
	// One transaction: one commit, so the generation moved by exactly one.
	CHECK(*after == *before + 1);

	CHECK(jsonElementCount(runOrFail("nft -j list set inet ip-masq-agent nomasq-v4")) == 60001);
	CHECK(jsonElementCount(runOrFail("nft -j list set inet ip-masq-agent nomasq-v6")) == 40001);
	CHECK(matches(*backend, ruleset));
}

TEST_CASE("element lists are split into small messages, each described by its ranges")
{
	Config config;
	for (int i = 0; i < 3000; i++)
		config.nonMasqueradeCIDRs.push_back(
			parsePrefix(fmt::format("2001:db8:{:x}::/48", i * 2)).value());
	RulesetOptions options;
	options.enableIpv6 = true;
	auto encoded = netlink::encodeRuleset(buildRuleset(config, options));
	REQUIRE(encoded);
	const netlink::EncodedSet &v6 = encoded->sets.at(1);
	REQUIRE(v6.description == "set nomasq-v6");
	REQUIRE(v6.elements.size() > 1);
	// The chunks cover ranges 1..3001 (with fe80::/10) without gap or overlap.
	size_t next = 1;
	const std::regex described(R"(elements of set nomasq-v6 \(ranges (\d+)-(\d+) of 3001\))");
	for (const netlink::ElementChunk &chunk : v6.elements) {
		std::smatch m;
		REQUIRE(std::regex_match(chunk.description, m, described));
		CHECK(std::stoul(m[1]) == next);
		next = std::stoul(m[2]) + 1;
	}
	CHECK(next == 3002);

	auto batch = netlink::replaceTableBatch(*encoded, 1000);
	REQUIRE(batch);
	CHECK(batch->describe(1000) == "transaction start");
	CHECK(batch->describe(1001) == "table ip-masq-agent (created if missing)");
	CHECK(batch->describe(1002) == "table ip-masq-agent (deleting the previous one)");
	CHECK(batch->describe(1003) == "table ip-masq-agent");
	CHECK(batch->describe(batch->nextSequence() - 1) == "transaction commit");
	CHECK(batch->describe(999).empty());
	CHECK(batch->describe(batch->nextSequence()).empty());
	// Every message: numbered in order, well below the 64 KiB a netlink nest can span.
	uint32_t seq = 1000;
	size_t total = 0;
	for (const iovec &page : batch->iovecs()) {
		size_t offset = 0;
		while (offset < page.iov_len) {
			const auto *nlh = reinterpret_cast<const nlmsghdr *>(
				static_cast<const char *>(page.iov_base) + offset);
			CHECK(nlh->nlmsg_seq == seq++);
			CHECK(nlh->nlmsg_len < 32 * 1024);
			offset += NLMSG_ALIGN(nlh->nlmsg_len);
			total++;
		}
	}
	CHECK(seq == batch->nextSequence());
	CHECK(total == batch->acknowledgedMessages() + 2);
	// With counters on and both families, each NAT rule is limited to its family.
	// The rule as nft lists it (the codec's reading of what is sent), without its comment.
	std::string lastRule =
		"rule in chain IP-MASQ-AGENT: meta nfproto ipv6 counter name \"masq-v6\" masquerade fully-random";
	CHECK(batch->describe(batch->nextSequence() - 2) == lastRule);
}

TEST_CASE("a batch the kernel rejects changes nothing and the error names the object")
{
	auto backend = freshBackend();
	const Ruleset good = buildRuleset(defaultConfig({}), RulesetOptions{});
	requireApplied(*backend, good);
	const std::string before = runOrFail(kListTable);
	auto generation = backend->generation();
	REQUIRE(generation);

	const auto requireRejected = [&](const Ruleset &bad, const std::string &expected,
					 int errnum) {
		auto result = backend->apply(bad);
		REQUIRE_FALSE(result);
		INFO(result.error().message);
		CHECK(result.error().message.find(expected) != std::string::npos);
		CHECK(result.error().errnum == errnum);
		CHECK(runOrFail(kListTable) == before);
		CHECK(backend->generation().value() == *generation);
		CHECK(matches(*backend, good));
	};

	SECTION("a nat chain before conntrack")
	{
		Ruleset bad = good;
		bad.chains[0].hook->priority = -300;
		requireRejected(bad, "chain postrouting: Operation not supported", EOPNOTSUPP);
	}
	SECTION("a jump to a chain that does not exist")
	{
		Ruleset bad = good;
		std::get<JumpIfNotLocal>(bad.chains[0].rules[0].statement).target = "NO-SUCH-CHAIN";
		requireRejected(bad,
				"rule in chain postrouting: meta nfproto ipv4 fib daddr type != local "
				"jump NO-SUCH-CHAIN: No such file or directory",
				ENOENT);
	}
	SECTION("two different sets of one name")
	{
		Ruleset bad = good;
		const Prefix ula = parsePrefix("fd00::/8").value();
		AddressSet clash{"nomasq-v4", IntervalSet::fromPrefixes(Family::ipv6, {ula}), {}};
		bad.sets.push_back(clash);
		requireRejected(bad, "set nomasq-v4: File exists", EEXIST);
	}
	SECTION("a comment nft would refuse is refused before sending")
	{
		Ruleset bad = good;
		bad.chains[1].rules[0].comment = std::string(200, 'x');
		requireRejected(bad, "the comment of rule 1 in chain IP-MASQ-AGENT is 200 characters long", 0);
	}
}

TEST_CASE("matches() tells whether the kernel's table is exactly the desired one")
{
	auto backend = freshBackend();
	RulesetOptions options;
	options.toPorts = {PortRange{1024, 29999}, PortRange{32768, 65535}};
	const Ruleset ruleset = buildRuleset(defaultConfig({}), options);

	CHECK_FALSE(matches(*backend, ruleset)); // no table at all
	runOrFail("nft add table inet other");
	CHECK_FALSE(matches(*backend, ruleset));

	requireApplied(*backend, ruleset);
	CHECK(matches(*backend, ruleset));

	SECTION("an element added by hand")
	{
		runOrFail("nft add element inet ip-masq-agent nomasq-v4 '{ 203.0.113.7 }'");
		CHECK_FALSE(matches(*backend, ruleset));
		requireApplied(*backend, ruleset);
		CHECK(matches(*backend, ruleset));
	}
	SECTION("a rule deleted by hand")
	{
		const std::string chain =
			runOrFail("nft -a list chain inet ip-masq-agent IP-MASQ-AGENT");
		std::smatch m;
		REQUIRE(std::regex_search(chain, m, std::regex("masquerade.*# handle ([0-9]+)")));
		runOrFail(fmt::format("nft delete rule inet ip-masq-agent IP-MASQ-AGENT handle {}",
				      m[1].str()));
		CHECK_FALSE(matches(*backend, ruleset));
	}
	SECTION("a chain added by hand")
	{
		runOrFail("nft add chain inet ip-masq-agent extra");
		CHECK_FALSE(matches(*backend, ruleset));
	}
	SECTION("a rule inserted by hand")
	{
		runOrFail("nft insert rule inet ip-masq-agent IP-MASQ-AGENT counter");
		CHECK_FALSE(matches(*backend, ruleset));
	}
	SECTION("a different port split")
	{
		RulesetOptions other = options;
		other.toPorts = {PortRange{1024, 29999}, PortRange{32768, 65534}};
		CHECK_FALSE(matches(*backend, buildRuleset(defaultConfig({}), other)));
	}
	SECTION("the table removed")
	{
		REQUIRE(backend->remove(ruleset.table));
		CHECK_FALSE(matches(*backend, ruleset));
	}
	CHECK(runOrFail("nft list table inet other").find("table inet other") != std::string::npos);
}

TEST_CASE("the check sees what an edit by hand changes besides elements and rules: comments and the "
	  "table's flags")
{
	auto backend = freshBackend();
	const Ruleset ruleset = buildRuleset(configWith({"198.51.100.0/24", "203.0.113.0/24"}), {});
	requireApplied(*backend, ruleset);
	REQUIRE(matches(*backend, ruleset));

	SECTION("an element's comment")
	{
		runOrFail("nft delete element inet ip-masq-agent nomasq-v4 '{ 203.0.113.0/24 }' && nft add "
			  "element inet ip-masq-agent nomasq-v4 '{ 203.0.113.0/24 comment \"edited\" }'");
		CHECK_FALSE(matches(*backend, ruleset));
	}
	SECTION("a rule's comment")
	{
		const std::string chain = runOrFail("nft -a list chain inet ip-masq-agent IP-MASQ-AGENT");
		std::smatch m;
		const std::regex masquerade(R"((\S[^\n]*masquerade[^\n]*) comment "[^"]*" # handle (\d+))");
		REQUIRE(std::regex_search(chain, m, masquerade));
		runOrFail(fmt::format("nft replace rule inet ip-masq-agent IP-MASQ-AGENT handle {} {} "
				      "comment \"edited\"", m[2].str(), m[1].str()));
		CHECK_FALSE(matches(*backend, ruleset));
	}
	SECTION("the table's flags")
	{
		runOrFail("nft add table inet ip-masq-agent '{ flags dormant; }'");
		CHECK_FALSE(matches(*backend, ruleset));
	}
	requireApplied(*backend, ruleset);
	CHECK(matches(*backend, ruleset));
}

TEST_CASE("generation() follows commits")
{
	auto backend = freshBackend();
	auto start = backend->generation();
	REQUIRE(start);

	auto applied = backend->apply(buildRuleset(defaultConfig({}), RulesetOptions{}));
	REQUIRE(applied);
	CHECK(*applied != *start);
	CHECK(backend->generation().value() == *applied);

	runOrFail("nft add table inet other");
	CHECK(backend->generation().value() != *applied);
}

TEST_CASE("without CAP_NET_ADMIN, open() says what is missing")
{
	const pid_t child = fork();
	REQUIRE(child >= 0);
	if (child == 0) {
		// Drop every capability of this child (root without capabilities).
		__user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
		__user_cap_data_struct data[2]{};
		if (syscall(SYS_capset, &header, data) != 0)
			_exit(2);
		auto backend = NetlinkBackend::open();
		const bool ok = !backend && backend.error().errnum == EPERM &&
				backend.error().message.find("CAP_NET_ADMIN") != std::string::npos;
		_exit(ok ? 0 : 1);
	}
	int status = 0;
	REQUIRE(waitpid(child, &status, 0) == child);
	REQUIRE(WIFEXITED(status));
	CHECK(WEXITSTATUS(status) == 0);
}

namespace {

// New flows through the nat postrouting hook of this namespace: UDP datagrams, each from a
// source port never used before in this process (so a new conntrack entry: a port the
// kernel picked could repeat one of an earlier flow, whose entry lives 30 s, and a
// packet of a known entry never reaches the nat chains), to an address behind a veth whose
// peer never answers: each first packet is counted by the agent's table (masq-v4: not in
// any non-masquerade set) before the neighbour lookup holds it.
void sendNewFlows(int flows)
{
	static uint16_t nextSourcePort = 40000;
	if (run("ip link show t9 >/dev/null 2>&1") != 0)
		runOrFail("ip link add t9 type veth peer name t9p && ip addr add 198.18.9.1/24 dev t9 "
			  "&& ip link set t9p up && ip link set t9 up");
	sockaddr_in to{};
	to.sin_family = AF_INET;
	to.sin_port = htons(9);
	inet_pton(AF_INET, "198.18.9.9", &to.sin_addr);
	for (int i = 0; i < flows; i++) {
		const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		REQUIRE(fd >= 0);
		sockaddr_in from{};
		from.sin_family = AF_INET;
		from.sin_port = htons(nextSourcePort++);
		REQUIRE(bind(fd, reinterpret_cast<const sockaddr *>(&from), sizeof(from)) == 0);
		const char byte = 'x';
		const ssize_t sent =
			sendto(fd, &byte, 1, 0, reinterpret_cast<const sockaddr *>(&to), sizeof(to));
		close(fd);
		REQUIRE(sent == 1);
	}
}

// `nft -a list counters` of the agent's table: name -> "handle H packets P".
std::map<std::string, std::string> counterObjects()
{
	const std::string listing = runOrFail("nft -a list counters table inet ip-masq-agent");
	static const std::regex counter(
		R"re(counter (\S+) \{ # handle (\d+)[^}]*?packets (\d+) bytes \d+)re");
	std::map<std::string, std::string> out;
	for (auto it = std::sregex_iterator(listing.begin(), listing.end(), counter);
	     it != std::sregex_iterator(); ++it)
		out[(*it)[1]] = fmt::format("handle {} packets {}", (*it)[2].str(), (*it)[3].str());
	return out;
}

uint64_t packetsOf(const std::string &counter)
{
	const std::string listing = runOrFail("nft list counter inet ip-masq-agent " + counter);
	std::smatch m;
	REQUIRE(std::regex_search(listing, m, std::regex(R"(packets (\d+))")));
	return std::stoull(m[1]);
}

// The table's listing with every counter's values zeroed: what `nft -f` of the dry-run
// makes, whatever traffic counted.
std::string listingWithoutValues()
{
	static const std::regex values(R"(packets \d+ bytes \d+)");
	return std::regex_replace(runOrFail(kListTable), values, "packets 0 bytes 0");
}

// The same table as `nft -f` of the rendering makes it, in a table of its own name.
std::string renderedListing(const Ruleset &ruleset)
{
	Ruleset renamed = ruleset;
	renamed.table = "parity-check";
	const auto rendered = renderNftScript(renamed);
	REQUIRE(rendered);
	TempFile script(*rendered);
	runOrFail("nft -f " + script.path());
	std::string listing = runOrFail("nft list table inet parity-check");
	runOrFail("nft delete table inet parity-check");
	return std::regex_replace(listing, std::regex("parity-check"), "ip-masq-agent");
}

} // namespace

TEST_CASE("a replacement keeps the counter objects: they go on counting, and the table lists as "
	  "nft -f of its rendering")
{
	auto backend = freshBackend();
	Config config = configWith({"10.0.0.0/8"});
	const Ruleset first = buildRuleset(config, {});
	requireApplied(*backend, first);
	sendNewFlows(5);
	const auto before = counterObjects();
	REQUIRE(packetsOf("masq-v4") == 5);

	SECTION("the same counters: kept, the very same objects")
	{
		config.nonMasqueradeCIDRs.push_back(parsePrefix("192.0.2.0/24").value());
		const Ruleset second = buildRuleset(config, {});
		requireApplied(*backend, second);
		CHECK(counterObjects() == before); // handles and values
		CHECK(matches(*backend, second));
		CHECK(listingWithoutValues() == renderedListing(second));
		sendNewFlows(3);
		CHECK(packetsOf("masq-v4") == 8);
	}
	SECTION("a counter the config puts first: the later ones are made again, with their values")
	{
		config.masqueradeSourceCIDRs.push_back(parsePrefix("198.18.0.0/15").value());
		const Ruleset second = buildRuleset(config, {});
		REQUIRE(second.counters.front().name == "nomasq-src-v4");
		requireApplied(*backend, second);
		CHECK(packetsOf("masq-v4") == 5);
		CHECK(counterObjects().at("masq-v4") != before.at("masq-v4")); // a new handle
		CHECK(matches(*backend, second));
		// nft lists objects in the order they were made: the dry-run's.
		CHECK(listingWithoutValues() == renderedListing(second));
		// And back: nomasq-src-v4 goes, the others were made after it and are kept.
		const auto made = counterObjects();
		requireApplied(*backend, first);
		CHECK(counterObjects().at("masq-v4") == made.at("masq-v4"));
		CHECK(listingWithoutValues() == renderedListing(first));
	}
	SECTION("a counter dropped and brought back: it starts from its last value")
	{
		RulesetOptions noCounters;
		noCounters.connectionCounters = false;
		requireApplied(*backend, buildRuleset(config, noCounters));
		CHECK(counterObjects().empty());
		requireApplied(*backend, first);
		CHECK(packetsOf("masq-v4") == 5);
	}
	SECTION("what was added by hand goes: chains, sets, objects, a flowtable")
	{
		runOrFail("nft add chain inet ip-masq-agent extra && nft add rule inet ip-masq-agent "
			  "extra counter && nft insert rule inet ip-masq-agent IP-MASQ-AGENT jump extra "
			  "&& nft add set inet ip-masq-agent hand '{ type ipv4_addr; }' "
			  "&& nft add quota inet ip-masq-agent q '{ over 10 mbytes }' "
			  "&& nft add counter inet ip-masq-agent hand-counter");
		// Flowtables need nf_flow_table_inet, which a kernel may lack (ENOENT): then the
		// rest is checked without one.
		const bool flowtable = run("nft add flowtable inet ip-masq-agent ft '{ hook ingress "
					   "priority 0; devices = { t9 }; }' 2>/dev/null") == 0;
		if (!flowtable)
			WARN("no flowtable support in this kernel: a flowtable added by hand is not tried");
		CHECK_FALSE(matches(*backend, first));
		requireApplied(*backend, first);
		CHECK(matches(*backend, first));
		CHECK(listingWithoutValues() == renderedListing(first));
		CHECK(runOrFail("nft list flowtables").find("ft") == std::string::npos);
		CHECK(counterObjects().at("masq-v4") == before.at("masq-v4"));
	}
	SECTION("a counter whose comment was changed by hand is made again, with its value")
	{
		runOrFail("nft delete rule inet ip-masq-agent IP-MASQ-AGENT handle $(nft -a list chain "
			  "inet ip-masq-agent IP-MASQ-AGENT | sed -n 's/.*\"masq-v4\".*# handle //p')");
		runOrFail("nft delete counter inet ip-masq-agent masq-v4 && nft add counter inet "
			  "ip-masq-agent masq-v4 '{ comment \"edited\"; packets 5 bytes 140; }'");
		requireApplied(*backend, first);
		CHECK(matches(*backend, first));
		CHECK(packetsOf("masq-v4") == 5);
		CHECK(listingWithoutValues() == renderedListing(first));
	}
	SECTION("a dormant table is deleted and made again, its counts carried")
	{
		runOrFail("nft add table inet ip-masq-agent '{ flags dormant; }'");
		requireApplied(*backend, first);
		CHECK(matches(*backend, first));
		CHECK(packetsOf("masq-v4") == 5);
		CHECK(runOrFail(kListTable).find("dormant") == std::string::npos);
	}
	(void)run("ip link del t9 2>/dev/null");
}

TEST_CASE("the replacement that keeps counters is refused whole if anyone committed since it was "
	  "read")
{
	auto backend = freshBackend();
	const Ruleset first = buildRuleset(configWith({"10.0.0.0/8"}), {});
	requireApplied(*backend, first);
	const std::string listed = runOrFail(kListTable);
	const Ruleset second = buildRuleset(configWith({"10.0.0.0/8", "192.0.2.0/24"}), {});
	auto encoded = netlink::encodeRuleset(second);
	REQUIRE(encoded);
	netlink::ReplacementPlan plan;
	plan.generation = backend->generation().value();
	plan.deleteChains = {"postrouting", "IP-MASQ-AGENT"};
	plan.deleteSets = {"nomasq-v4"};
	for (const NamedCounter &counter : second.counters)
		plan.keptCounters.push_back(counter.name);

	runOrFail("nft add table inet someone-else"); // another program commits
	auto socket = netlink::Socket::open();
	REQUIRE(socket);
	auto batch = netlink::replaceKeepingCountersBatch(*encoded, plan, socket->sequence());
	REQUIRE(batch);
	auto answer = socket->sendBatch(*batch);
	REQUIRE(answer);
	REQUIRE_FALSE(answer->failures.empty());
	CHECK(answer->failures.front().error == ERESTART);
	CHECK(runOrFail(kListTable) == listed); // nothing changed

	// The same batch, given the current generation, commits.
	REQUIRE(batch->setGuard(backend->generation().value()));
	answer = socket->sendBatch(*batch);
	REQUIRE(answer);
	CHECK(answer->failures.empty());
	CHECK(matches(*backend, second));
	run("nft delete table inet someone-else");
}

TEST_CASE("one read of the table per generation: a restore reads it once, adoption once, a check "
	  "that found the table intact keeps nothing; the counters are read every time")
{
	auto backend = freshBackend();
	int reads = 0;
	backend->onEachRead([&reads] { reads++; });
	const Ruleset ruleset = buildRuleset(configWith({"198.51.100.0/24"}), {});
	requireApplied(*backend, ruleset);

	// A drift: the check reads the table, and the restore that follows plans with that read.
	runOrFail("nft add element inet ip-masq-agent nomasq-v4 '{ 203.0.113.7 }'");
	reads = 0;
	CHECK_FALSE(matches(*backend, ruleset));
	CHECK(reads == 1);
	requireApplied(*backend, ruleset);
	CHECK(reads == 1);
	CHECK(matches(*backend, ruleset)); // its own commit made a new generation
	CHECK(reads == 2);
	// A check that found the table intact keeps nothing: nothing will plan with it.
	CHECK(matches(*backend, ruleset));
	CHECK(reads == 3);
	// One that found a difference keeps its read for the restore, or a second check.
	const Ruleset other = buildRuleset(configWith({"192.0.2.0/24"}), {});
	CHECK_FALSE(matches(*backend, other));
	CHECK_FALSE(matches(*backend, other));
	CHECK(reads == 4);

	// Counters count without commits: their values are read every time, never the last read's.
	sendNewFlows(3);
	auto counted = backend->readCounters(ruleset.table);
	REQUIRE(counted);
	const auto masq = std::find_if(counted->begin(), counted->end(),
				       [](const CounterValue &value) { return value.name == "masq-v4"; });
	REQUIRE(masq != counted->end());
	CHECK(masq->packets == 3);
	CHECK(reads == 4);
	(void)run("ip link del t9 2>/dev/null");

	// Adoption, as the daemon started with a bad config does it: the table read once, the
	// candidate built from it checked against that read.
	auto opened = NetlinkBackend::open();
	REQUIRE(opened);
	NetlinkBackend &adopting = **opened;
	int adoptionReads = 0;
	adopting.onEachRead([&adoptionReads] { adoptionReads++; });
	auto kernel = adopting.readTable(ruleset.table);
	REQUIRE(kernel);
	REQUIRE(*kernel);
	const auto candidate = rulesetFromKernel({}, **kernel);
	REQUIRE(candidate);
	CHECK(*candidate == ruleset);
	CHECK(matches(adopting, *candidate));
	CHECK(adoptionReads == 1);
}

TEST_CASE("a whole read of the table leaves out what the guard's dynamic sets hold: traffic's, never "
	  "compared, up to 65,536 keys a set")
{
	auto backend = freshBackend();
	Config config = configWith({"198.51.100.0/24"});
	SnatGuard guard;
	guard.mode = SnatGuardMode::observe;
	guard.newConnectionsPerSecond = 20;
	guard.openConnections = 30;
	config.snatGuard = guard;
	const Ruleset ruleset = buildRuleset(config, {});
	REQUIRE(ruleset.dynamicSets.size() == 4);
	requireApplied(*backend, ruleset);
	// What traffic puts there, by hand: a key in each of the guard's sets (an hour's
	// timeout where the set's own is 2 s, so that the read finds it).
	for (const DynamicSet &set : ruleset.dynamicSets)
		runOrFail(fmt::format("nft add element inet {} {} '{{ 198.18.0.1 . 192.0.2.1 . tcp . 443{} }}'",
				      ruleset.table, set.name, set.timeoutMs ? " timeout 1h" : ""));

	auto socket = netlink::Socket::open();
	REQUIRE(socket);
	netlink::TableReader reader(*socket);
	const auto read = reader.read(ruleset.table, netlink::ReadDepth::whole);
	REQUIRE(read);
	REQUIRE_FALSE(read->unsettled);
	REQUIRE(read->snapshot);
	// The read is whole: the address set's elements are in it; the dynamic sets' are not.
	CHECK(read->snapshot->elements.contains("nomasq-v4"));
	for (const DynamicSet &set : ruleset.dynamicSets) {
		INFO(set.name);
		CHECK_FALSE(read->snapshot->elements.contains(set.name));
	}
	CHECK(matches(*backend, ruleset)); // and their keys are not drift
}

TEST_CASE("a replacement planned with the check's read starts the counters it makes again from their "
	  "values now")
{
	auto backend = freshBackend();
	int reads = 0;
	backend->onEachRead([&reads] { reads++; });
	Config config = configWith({"198.51.100.0/24"});
	const Ruleset first = buildRuleset(config, {});
	requireApplied(*backend, first);
	// A counter the config puts first: masq-v4 is made again, from its value.
	config.masqueradeSourceCIDRs.push_back(parsePrefix("198.18.0.0/15").value());
	const Ruleset second = buildRuleset(config, {});
	REQUIRE(second.counters.front().name == "nomasq-src-v4");
	sendNewFlows(5);
	CHECK_FALSE(matches(*backend, second)); // read: masq-v4 at 5
	sendNewFlows(3); // counted since, no commit
	reads = 0;
	requireApplied(*backend, second);
	CHECK(reads == 0); // planned with the check's read
	CHECK(packetsOf("masq-v4") == 8);
	(void)run("ip link del t9 2>/dev/null");
}

TEST_CASE("on a busy node, a replacement keeps its counters: each read that another table's commit "
	  "interrupts holds at the generation after it, and the batch is sent against that")
{
	auto backend = freshBackend();
	Config config = configWith({"198.51.100.0/24"});
	const Ruleset first = buildRuleset(config, {});
	requireApplied(*backend, first);
	sendNewFlows(2);
	const auto before = counterObjects();
	// A whole replacement makes the table again: a new handle (its objects' may repeat).
	const auto tableHandle = [] {
		std::smatch m;
		const std::string listing = runOrFail("nft -a list table inet ip-masq-agent");
		REQUIRE(std::regex_search(listing, m, std::regex(R"(ip-masq-agent \{ # handle (\d+))")));
		return m[1].str();
	};
	const std::string handle = tableHandle();
	// Someone commits a table of its own in the middle of every read, as on a busy node.
	int commits = 0;
	backend->onEachRead([&commits] { runOrFail(fmt::format("nft add table ip busy-{}", ++commits)); });
	RulesetOptions ports;
	ports.toPorts = {PortRange{1024, 65535}};
	const Ruleset second = buildRuleset(config, ports); // other rules: a replacement
	REQUIRE_FALSE(diffElements(first, second));
	requireApplied(*backend, second);
	CHECK(commits == 1); // read once, sent once
	CHECK(tableHandle() == handle); // not replaced whole
	CHECK(counterObjects() == before); // the same objects, with their counts
	backend->onEachRead({});
	CHECK(matches(*backend, second));
	CHECK(listingWithoutValues() == renderedListing(second));
	for (int i = 1; i <= commits; i++)
		run(fmt::format("nft delete table ip busy-{}", i));
	(void)run("ip link del t9 2>/dev/null");
}
