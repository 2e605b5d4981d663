// SPDX-License-Identifier: Apache-2.0
// The files that tell the pod network: Flannel's subnet.env and the CNI's network configs,
// parsed and read with bounds, with errors that name file, line and what is wrong.
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>

#include "ip-masq-agent/node/cni_conf.h"
#include "ip-masq-agent/node/flannel_subnet_env.h"
#include "scratch_dir.h"

using namespace ipmasq;
using test::ScratchDir;

namespace {

const std::string kEnv = "/run/flannel/subnet.env";

std::vector<std::string> networks(const FlannelSubnetEnv &env)
{
	std::vector<std::string> out;
	for (const FlannelNetwork &n : env.networks)
		out.push_back(fmt::format("{} {}:{}", n.prefix.toString(), n.key, n.line));
	return out;
}

FlannelSubnetEnv envOk(const std::string &text)
{
	auto env = parseFlannelSubnetEnv(text, kEnv);
	INFO(text << "\n" << (env ? "" : env.error().message));
	REQUIRE(env);
	return *env;
}

std::string envError(const std::string &text)
{
	auto env = parseFlannelSubnetEnv(text, kEnv);
	INFO(text);
	REQUIRE_FALSE(env);
	return env.error().message;
}

const std::string kConf = "/etc/cni/net.d/10-bridge.conflist";

std::vector<std::string> subnets(const CniConf &conf)
{
	std::vector<std::string> out;
	for (const CniSubnet &s : conf.subnets)
		out.push_back(fmt::format("{} {}:{}", s.prefix.toString(), s.plugin, s.line));
	return out;
}

CniConf confOk(const std::string &text, CniConfForm form = CniConfForm::list)
{
	auto conf = parseCniConf(text, kConf, form);
	INFO(text << "\n" << (conf ? "" : conf.error().message));
	REQUIRE(conf);
	return *conf;
}

std::string confError(const std::string &text, CniConfForm form = CniConfForm::list)
{
	auto conf = parseCniConf(text, kConf, form);
	INFO(text);
	REQUIRE_FALSE(conf);
	return conf.error().message;
}

// The bridge plugin's conflist as kubeadm guides and the containernetworking docs write it.
const std::string kBridgeConflist = R"({
  "cniVersion": "1.0.0",
  "name": "podnet",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "cni0",
      "isGateway": true,
      "ipMasq": false,
      "ipam": {
        "type": "host-local",
        "ranges": [
          [{"subnet": "10.244.1.0/24", "gateway": "10.244.1.1"}],
          [{"subnet": "fd00:10:244:1::/64"}]
        ],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
})";

} // namespace

TEST_CASE("subnet.env: flanneld's file, both families")
{
	const FlannelSubnetEnv env = envOk("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\n"
					   "FLANNEL_IPV6_NETWORK=fd00:10:244::/56\n"
					   "FLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\nFLANNEL_MTU=1450\n"
					   "FLANNEL_IPMASQ=true\n");
	CHECK(networks(env) == std::vector<std::string>{"10.244.0.0/16 FLANNEL_NETWORK:1",
							"fd00:10:244::/56 FLANNEL_IPV6_NETWORK:3"});
	// Only one family, blank lines, comments, quotes as a shell reads them, no final newline.
	CHECK(networks(envOk("# written by hand\n\n  FLANNEL_NETWORK=\"10.42.0.0/16\"  \nFLANNEL_MTU=1450")) ==
	      std::vector<std::string>{"10.42.0.0/16 FLANNEL_NETWORK:3"});
	CHECK(networks(envOk("FLANNEL_IPV6_NETWORK='fd00::/48'\n")) ==
	      std::vector<std::string>{"fd00::/48 FLANNEL_IPV6_NETWORK:1"});
	// flanneld's multi-network form.
	CHECK(networks(envOk("FLANNEL_NETWORK=10.244.0.0/16,10.245.0.0/16\n")) ==
	      std::vector<std::string>{"10.244.0.0/16 FLANNEL_NETWORK:1", "10.245.0.0/16 FLANNEL_NETWORK:1"});
	// FLANNEL_SUBNET has host bits set (the node's gateway address): it is not looked at.
	CHECK(envOk("FLANNEL_SUBNET=garbage\nFLANNEL_NETWORK=10.244.0.0/16\n").networks.size() == 1);
}

TEST_CASE("subnet.env: what is refused, and the message")
{
	CHECK(envError("FLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n") ==
	      "/run/flannel/subnet.env: holds neither FLANNEL_NETWORK nor FLANNEL_IPV6_NETWORK: flanneld "
	      "writes one at least, so the file is not finished or not flanneld's subnet.env");
	CHECK(envError("") == envError("\n# nothing\n"));
	CHECK(envError("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_NETWORK=10.245.0.0/16\n") ==
	      "/run/flannel/subnet.env:2: FLANNEL_NETWORK is given twice (first at line 1): keep one");
	CHECK(envError("FLANNEL_NETWORK=10.244.0.0/16\nthis is not a setting\n") ==
	      "/run/flannel/subnet.env:2: \"this is not a setting\" is not KEY=VALUE: flanneld writes "
	      "lines such as FLANNEL_NETWORK=10.244.0.0/16");
	CHECK(envError("FLANNEL_NETWORK=10.244.0.1/16\n") ==
	      "/run/flannel/subnet.env:1: FLANNEL_NETWORK: CIDR \"10.244.0.1/16\" is not aligned to a "
	      "CIDR block: host bits are set (the network is 10.244.0.0/16). Write \"10.244.0.0/16\" if "
	      "you meant the whole network");
	CHECK(envError("FLANNEL_NETWORK=fd00::/48\n") ==
	      "/run/flannel/subnet.env:1: FLANNEL_NETWORK: \"fd00::/48\" is an IPv6 CIDR; FLANNEL_NETWORK "
	      "holds IPv4 networks");
	CHECK(envError("FLANNEL_IPV6_NETWORK=10.0.0.0/8\n") ==
	      "/run/flannel/subnet.env:1: FLANNEL_IPV6_NETWORK: \"10.0.0.0/8\" is an IPv4 CIDR; "
	      "FLANNEL_IPV6_NETWORK holds IPv6 networks");
	CHECK(envError("FLANNEL_NETWORK=\n") ==
	      "/run/flannel/subnet.env:1: FLANNEL_NETWORK is empty: it must name the pod network, such "
	      "as 10.244.0.0/16");
	CHECK_THAT(envError("FLANNEL_NETWORK=10.244.0.0/16,\n"), Catch::Contains("could not be parsed"));
	CHECK_THAT(envError("FLANNEL_NETWORK=10.244.0.0/16 10.245.0.0/16\n"),
		   Catch::Contains("holds blanks, quotes or shell syntax"));
	CHECK_THAT(envError("FLANNEL_NETWORK=$NET\n"), Catch::Contains("shell syntax"));
	CHECK(envError("FLANNEL_NETWORK=10.244.0.0/16\r\n") ==
	      "/run/flannel/subnet.env:1: holds a control byte \"\\r\" (is this a text file?)");
	CHECK_THAT(envError(std::string("FLANNEL_NETWORK=10.244.0.0/16\n\0\n", 32)),
		   Catch::StartsWith("/run/flannel/subnet.env:2: holds a control byte \"\\x00\""));
	// A truncated write (flanneld's older versions write in place).
	CHECK_THAT(envError("FLANNEL_NETWORK=10.24"), Catch::Contains("could not be parsed"));
	// Long values are cut in the message.
	CHECK_THAT(envError("FLANNEL_NETWORK=" + std::string(5000, '1') + "\n"),
		   Catch::Contains("... (5000 bytes) is not a CIDR"));
	std::string many = "FLANNEL_NETWORK=10.0.0.0/16";
	for (int i = 1; i <= 64; i++)
		many += fmt::format(",10.{}.0.0/16", i);
	CHECK_THAT(envError(many), Catch::Contains("lists more than 64 networks"));
}

TEST_CASE("subnet.env: read from disk, bounded; absent is not an error")
{
	ScratchDir dir;
	auto absent = readFlannelSubnetEnv(dir.file("subnet.env"));
	REQUIRE(absent);
	CHECK_FALSE(*absent);
	dir.write("subnet.env", "FLANNEL_NETWORK=10.244.0.0/16\n");
	auto read = readFlannelSubnetEnv(dir.file("subnet.env"));
	REQUIRE(read);
	REQUIRE(*read);
	CHECK((*read)->networks.size() == 1);

	dir.write("large", "FLANNEL_NETWORK=10.244.0.0/16\n" + std::string(70000, '#') + "\n");
	auto large = readFlannelSubnetEnv(dir.file("large"));
	REQUIRE_FALSE(large);
	CHECK(large.error().message == dir.file("large") + ": is 70031 bytes, more than the 65536 bytes it may have");
	REQUIRE(mkfifo(dir.file("fifo").c_str(), 0600) == 0);
	auto fifo = readFlannelSubnetEnv(dir.file("fifo")); // never opened: would block
	REQUIRE_FALSE(fifo);
	CHECK(fifo.error().message == dir.file("fifo") + ": is a FIFO (named pipe), not a regular file (symlinks followed)");
	auto directory = readFlannelSubnetEnv(dir.path.string());
	REQUIRE_FALSE(directory);
	CHECK_THAT(directory.error().message, Catch::EndsWith(": is a directory, not a regular file (symlinks followed)"));
}

TEST_CASE("CNI: the bridge plugin's host-local ranges, both families, with lines")
{
	CHECK(subnets(confOk(kBridgeConflist)) ==
	      std::vector<std::string>{"10.244.1.0/24 bridge:13", "fd00:10:244:1::/64 bridge:14"});
	// A .conf holds one plugin at the top.
	CHECK(subnets(confOk(R"({"cniVersion": "0.3.1", "name": "k", "type": "ptp",
		"ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.2.0/24"}, {"subnet": "10.244.3.0/24"}]]}})",
			     CniConfForm::single)) ==
	      std::vector<std::string>{"10.244.2.0/24 ptp:2", "10.244.3.0/24 ptp:2"});
	// host-local's older form: one "subnet" in the ipam itself; keys in any order.
	CHECK(subnets(confOk(R"({"plugins": [{"ipam": {"subnet": "10.1.0.0/16", "type": "host-local"}, "type": "bridge"}]})")) ==
	      std::vector<std::string>{"10.1.0.0/16 bridge:1"});
}

TEST_CASE("CNI: other IPAMs, other plugins and other keys are not looked at")
{
	// Calico's own IPAM, Flannel's delegate, a DHCP IPAM, ranges outside "ipam".
	CHECK(confOk(R"({"plugins": [{"type": "calico", "ipam": {"type": "calico-ipam", "subnet": "usePodCidr"}},
		{"type": "flannel", "delegate": {"hairpinMode": true, "ipam": {"type": "host-local", "subnet": "10.0.0.0/8"}}},
		{"type": "macvlan", "ipam": {"type": "dhcp"}},
		{"type": "x", "ranges": [[{"subnet": "10.9.0.0/16"}]]}]})").subnets.empty());
	// A .conflist's top-level "ipam" is not a plugin's; a .conf's "plugins" means nothing.
	CHECK(confOk(R"({"ipam": {"type": "host-local", "subnet": "10.0.0.0/8"}, "plugins": []})").subnets.empty());
	CHECK(confOk(R"({"plugins": [{"type": "host-local"}], "type": "bridge"})", CniConfForm::single).subnets.empty());
	// A repeated "ipam": the last one counts, as Go's decoder takes it.
	CHECK(subnets(confOk(R"({"plugins": [{"type": "b", "ipam": {"type": "host-local", "subnet": "10.0.0.0/8"},
		"ipam": {"type": "host-local", "subnet": "10.244.0.0/16"}}]})")) ==
	      std::vector<std::string>{"10.244.0.0/16 b:2"});
	// Every JSON value kind, escapes included, where nothing is read.
	CHECK(confOk(R"({"a": [1, -2.5e+3, 0, true, false, null, "\u00e9\"\\\/\b\f\n\r\t", {}, []], "plugins": []})").subnets.empty());
}

TEST_CASE("CNI: what JSON libraries refuse and libcni reads is read: bytes that are not UTF-8, lone surrogates, huge numbers")
{
	// A name in Latin-1, a lone surrogate escape, numbers past a double's range: the file is
	// read, the plugin's type keeps its bytes as written, the lines are the file's.
	const std::string text = "{\"name\": \"r\xe9seau \\ud800\", \"mtu\": 1e999,\n"
				 "\"big\": " + std::string(400, '9') + ",\n\"plugins\": [{\"type\": \"br\xed" "dge\\u00e9\",\n"
				 "\"ipam\": {\"type\": \"host-local\", \"x\": [-0.5E-999999],\n"
				 "\"ranges\": [[{\"subnet\": \"198.18.1.0/24\"}]]}}]}";
	CHECK(subnets(confOk(text)) == std::vector<std::string>{"198.18.1.0/24 br\xed" "dge\x7f:5"});
	// A number's line is its own, where a line ends right after it.
	CHECK(confError("{\"plugins\": [{\"ipam\": {\"type\": 3\n}}]}") ==
	      "/etc/cni/net.d/10-bridge.conflist:1: expected a string here");
	CHECK(confError("{\"plugins\": [{\"ipam\": {\"type\": \"host-local\",\n \"ranges\": [[{\"subnet\": -1e5\n}]]}}]}") ==
	      "/etc/cni/net.d/10-bridge.conflist:2: expected a string here");
	// A NUL ends the text for some JSON libraries; here it is text after the object.
	CHECK(confError(std::string("{\"plugins\": []}\0 ", 18)) ==
	      "/etc/cni/net.d/10-bridge.conflist:1: JSON syntax error: text after the end of the object (a CNI "
	      "network config is a JSON object)");
	// Syntax errors on the line they are on: after a separator, at the end of the file.
	CHECK_THAT(confError("{\n\"a\": [1,\n2 3]}"), Catch::StartsWith("/etc/cni/net.d/10-bridge.conflist:3: JSON syntax "
									 "error: expected \",\" or \"]\""));
	CHECK_THAT(confError("{\"a\":\n\n  tru}"), Catch::StartsWith("/etc/cni/net.d/10-bridge.conflist:3: JSON syntax "
									"error: expected a value"));
	CHECK_THAT(confError("{\"a\": [1,\n"), Catch::StartsWith("/etc/cni/net.d/10-bridge.conflist:2: JSON syntax error: "
								   "the file ends inside the object"));
	CHECK_THAT(confError("{\"a\": \"b\\\xe9\"}"), Catch::Contains("\"\\\\\\xe9\" is not an escape"));
}

TEST_CASE("CNI: what is refused, and the message")
{
	CHECK(confError("") == "/etc/cni/net.d/10-bridge.conflist:1: the file must be a JSON object, such as "
			       "{\"cniVersion\": \"1.0.0\", ...}");
	CHECK(confError("[1]") == confError(""));
	CHECK(confError("{\"plugins\": [}") ==
	      "/etc/cni/net.d/10-bridge.conflist:1: JSON syntax error: expected a value (a string, number, "
	      "object, list, true, false or null) (a CNI network config is a JSON object)");
	CHECK_THAT(confError("{\"a\": 1,}"), Catch::Contains("expected a key in double quotes"));
	CHECK_THAT(confError("{\"a\" 1}"), Catch::Contains("expected \":\" after the key"));
	CHECK_THAT(confError("{\"a\": [1 2]}"), Catch::Contains("expected \",\" or \"]\""));
	CHECK_THAT(confError("{\"a\": 1} x"), Catch::Contains("text after the end of the object"));
	CHECK_THAT(confError("{\"a\": \"b\n\"}"), Catch::Contains("a control character in a string"));
	CHECK_THAT(confError("{\"a\": \"\\x\"}"), Catch::Contains("\"\\\\x\" is not an escape"));
	CHECK_THAT(confError("{\"a\": \"\\u12\"}"), Catch::Contains("four hex digits"));
	CHECK_THAT(confError("{\"a\": 01}"), Catch::Contains("expected \",\" or \"}\""));
	CHECK_THAT(confError("{\"a\": 1.}"), Catch::Contains("digits after"));
	CHECK_THAT(confError("{\"a\": tru}"), Catch::Contains("expected a value"));
	CHECK_THAT(confError("{\"a\": \"b"), Catch::Contains("a string is not closed"));
	CHECK_THAT(confError("{\"a\": [1,"), Catch::Contains("the file ends inside the object"));
	// The schema where the reader follows it.
	CHECK(confError("{\n\"plugins\": {}}") ==
	      "/etc/cni/net.d/10-bridge.conflist:2: \"plugins\" must be a list");
	CHECK_THAT(confError("{\"plugins\": [{\"ipam\": []}]}"), Catch::Contains("\"ipam\" must be an object"));
	CHECK_THAT(confError("{\"plugins\": [{\"ipam\": {\"type\": 3}}]}"), Catch::Contains("expected a string here"));
	CHECK_THAT(confError("{\"plugins\": [{\"ipam\": {\"ranges\": [{}]}}]}"),
		   Catch::Contains("a range set of \"ranges\" must be a list"));
	CHECK_THAT(confError("{\"plugins\": [7]}"), Catch::Contains("expected a list or an object here"));
	// A host-local subnet must be a CIDR without host bits, as host-local requires.
	CHECK(confError("{\"plugins\": [{\"type\": \"bridge\",\n \"ipam\": {\"type\": \"host-local\", "
			"\"ranges\": [[{\"subnet\": \"10.244.1.1/24\"}]]}}]}") ==
	      "/etc/cni/net.d/10-bridge.conflist:2: subnet of host-local: CIDR \"10.244.1.1/24\" is not "
	      "aligned to a CIDR block: host bits are set (the network is 10.244.1.0/24). Write "
	      "\"10.244.1.0/24\" if you meant the whole network");
	CHECK_THAT(confError("{\"plugins\": [{\"ipam\": {\"type\": \"host-local\", \"subnet\": \"" +
			     std::string(300, 'a') + "\"}}]}"),
		   Catch::Contains("... (300 bytes) is not a CIDR"));
	// Bounds: nesting, subnets per file.
	CHECK_THAT(confError("{\"a\": " + std::string(100, '[') + std::string(100, ']') + "}"),
		   Catch::Contains("nested more than 64 levels deep"));
	std::string many = "{\"plugins\": [{\"ipam\": {\"type\": \"host-local\", \"ranges\": [[";
	for (int i = 0; i <= 1024; i++)
		many += fmt::format("{}{{\"subnet\": \"10.{}.{}.0/24\"}}", i ? "," : "", i / 256, i % 256);
	CHECK_THAT(confError(many + "]]}}]}"), Catch::Contains("more than 1024 subnets in the file"));
}

TEST_CASE("CNI: the directory's *.conflist and *.conf files, each read on its own")
{
	ScratchDir dir;
	auto absent = readCniConfDir(dir.file("net.d"));
	REQUIRE(absent);
	CHECK_FALSE(*absent);

	dir.write("10-bridge.conflist", kBridgeConflist);
	dir.write("20-ptp.conf", R"({"type": "ptp", "ipam": {"type": "host-local", "subnet": "10.245.0.0/16"}})");
	dir.write("30-broken.conflist", "{\"plugins\": [");
	dir.write(".10-bridge.conflist.swp", "not read");
	dir.write("99-notes.json", "not read");
	dir.write("README", "not read");
	REQUIRE(mkfifo(dir.file("40-fifo.conf").c_str(), 0600) == 0); // skipped, never opened
	REQUIRE(symlink("20-ptp.conf", dir.file("25-link.conf").c_str()) == 0);
	REQUIRE(symlink("missing", dir.file("26-dangling.conf").c_str()) == 0);
	auto read = readCniConfDir(dir.path.string());
	REQUIRE(read);
	REQUIRE(*read);
	const auto &files = **read;
	REQUIRE(files.size() == 4);
	CHECK(files[0].path == dir.file("10-bridge.conflist"));
	REQUIRE(files[0].conf);
	CHECK(files[0].conf->subnets.size() == 2);
	CHECK(files[1].path == dir.file("20-ptp.conf"));
	REQUIRE(files[1].conf);
	CHECK(subnets(*files[1].conf) == std::vector<std::string>{"10.245.0.0/16 ptp:1"});
	CHECK(files[2].path == dir.file("25-link.conf"));
	CHECK(files[3].path == dir.file("30-broken.conflist"));
	REQUIRE_FALSE(files[3].conf);
	CHECK_THAT(files[3].conf.error().message, Catch::StartsWith(dir.file("30-broken.conflist") + ":1: "));

	dir.write("50-large.conf", "{\"a\": \"" + std::string(300 * 1024, 'x') + "\"}");
	auto large = readCniConfDir(dir.path.string());
	REQUIRE(large);
	CHECK_THAT((*large)->back().conf.error().message, Catch::Contains("more than the 262144 bytes it may have"));

	auto notDir = readCniConfDir(dir.file("20-ptp.conf"));
	REQUIRE_FALSE(notDir);
	CHECK_THAT(notDir.error().message, Catch::Contains("is not a directory"));

	ScratchDir crowded;
	for (int i = 0; i <= 64; i++)
		crowded.write(fmt::format("{:02}.conf", i), "{}");
	auto tooMany = readCniConfDir(crowded.path.string());
	REQUIRE_FALSE(tooMany);
	CHECK_THAT(tooMany.error().message, Catch::Contains("more than 64 *.conflist and *.conf files"));
}

TEST_CASE("CNI: which names are network configs")
{
	CHECK(cniConfFormOf("10-flannel.conflist") == CniConfForm::list);
	CHECK(cniConfFormOf("87-podman.conf") == CniConfForm::single);
	CHECK_FALSE(cniConfFormOf(".conf"));
	CHECK_FALSE(cniConfFormOf(".hidden.conf"));
	CHECK_FALSE(cniConfFormOf("x.conf.bak"));
	CHECK_FALSE(cniConfFormOf("x.json"));
	CHECK_FALSE(cniConfFormOf("conf"));
}
