// SPDX-License-Identifier: Apache-2.0
// Command-line flags: upstream's names and defaults in every spelling Go's flag package accepts.
#include <catch2/catch.hpp>

#include <algorithm>

#include "ip-masq-agent/cli/options.h"

using namespace ipmasq;

namespace {

Result<CommandLine> parse(std::vector<const char *> args)
{
	args.insert(args.begin(), "ip-masq-agent");
	return parseCommandLine(static_cast<int>(args.size()), args.data());
}

AgentOptions parseOk(std::vector<const char *> args)
{
	auto cl = parse(args);
	INFO((cl ? "" : cl.error().message));
	REQUIRE(cl);
	REQUIRE(cl->action == CommandLine::Action::run);
	return cl->options;
}

std::string parseError(std::vector<const char *> args)
{
	auto cl = parse(args);
	REQUIRE_FALSE(cl);
	return cl.error().message;
}

} // namespace

TEST_CASE("defaults are upstream's")
{
	const AgentOptions o = parseOk({});
	CHECK(o.config == ConfigLocation::file("/etc/config/ip-masq-agent"));
	CHECK(o.ruleset.masqChain == "IP-MASQ-AGENT");
	CHECK_FALSE(o.configFlags.nomasqAllReservedRanges);
	CHECK_FALSE(o.configFlags.enableIpv6);
	CHECK(o.ruleset.randomFully);
	CHECK(o.ruleset.toPorts.empty());
	CHECK(o.ruleset.table == "ip-masq-agent");
	CHECK(o.ruleset.priority == 110);
	CHECK_FALSE(o.dryRun);
	CHECK(o.verbosity == 0);
}

TEST_CASE("Go spellings: --flag=value, --flag value, -flag=value, -flag value")
{
	for (auto args : std::vector<std::vector<const char *>>{{"--masq-chain=X"},
								{"--masq-chain", "X"},
								{"-masq-chain=X"},
								{"-masq-chain", "X"}})
		CHECK(parseOk(args).ruleset.masqChain == "X");
	CHECK(parseOk({"-v=2"}).verbosity == 2);
	CHECK(parseOk({"--v=3"}).verbosity == 3);
	CHECK(parseOk({"-v", "4"}).verbosity == 4);
	CHECK(parseOk({"--v", "1"}).verbosity == 1);
}

TEST_CASE("bool flags: bare, =true and =false")
{
	CHECK(parseOk({"--enable-ipv6"}).configFlags.enableIpv6);
	CHECK(parseOk({"--enable-ipv6=true"}).configFlags.enableIpv6);
	CHECK_FALSE(parseOk({"--enable-ipv6=false"}).configFlags.enableIpv6);
	CHECK(parseOk({"--enable-ipv6"}).ruleset.enableIpv6);
	CHECK(parseOk({"-nomasq-all-reserved-ranges"}).configFlags.nomasqAllReservedRanges);
	CHECK_FALSE(parseOk({"--random-fully=false"}).ruleset.randomFully);
	CHECK_FALSE(parseOk({"-random-fully=false"}).ruleset.randomFully);
	CHECK(parseOk({"--random-fully"}).ruleset.randomFully);
	CHECK(parseOk({"--dry-run"}).dryRun);
	CHECK(parseOk({"--once"}).once);
	CHECK(parseOk({"-cleanup"}).cleanup);
	CHECK_THAT(parseError({"--once", "--cleanup"}), Catch::Contains("exclude each other"));
	CHECK(parseOk({"--dry-run=true"}).dryRun);
	CHECK_FALSE(parseOk({"--once=false"}).once);
	CHECK(parseOk({"-cleanup=true"}).cleanup);
	// "--flag false" means what it says (Go would silently stop parsing there).
	CHECK_FALSE(parseOk({"--enable-ipv6", "false"}).configFlags.enableIpv6);
	CHECK(parseOk({"--enable-ipv6", "--dry-run"}).configFlags.enableIpv6);
	CHECK_THAT(parseError({"--config=x", "extra"}), Catch::Contains("unexpected argument \"extra\""));
	CHECK_THAT(parseError({"--dry-run", "extra"}), Catch::Contains("extra") && Catch::Contains("--dry-run"));
	CHECK_THAT(parseError({"--random-fully=maybe"}), Catch::Contains("random-fully"));
}

TEST_CASE("--to-ports and --priority are validated")
{
	CHECK(parseOk({"--to-ports=1024-29999,32768-65535"}).ruleset.toPorts.size() == 2);
	CHECK_THAT(parseError({"--to-ports=70000"}), Catch::Contains("--to-ports"));
	CHECK(parseOk({"--priority=srcnat"}).ruleset.priority == 100);
	CHECK(parseOk({"--priority", "-50"}).ruleset.priority == -50);
	CHECK_THAT(parseError({"--priority=-300"}), Catch::Contains("--priority"));
	CHECK_THAT(parseError({"--masq-chain=has space"}), Catch::Contains("--masq-chain"));
	CHECK_THAT(parseError({"--v=-1"}), Catch::Contains("verbosity"));
}

TEST_CASE("unknown flags are an error that names them")
{
	CHECK_THAT(parseError({"--masq-chian=X"}), Catch::Contains("unknown flag --masq-chian"));
	CHECK_THAT(parseError({"-bogus"}), Catch::Contains("--bogus"));
	// No prefix guessing: "--enable" is not silently --enable-ipv6.
	CHECK_THAT(parseError({"--enable"}), Catch::Contains("unknown flag"));
}

TEST_CASE("--help lists every flag with its default; --version")
{
	auto help = parse({"--help"});
	REQUIRE(help);
	CHECK(help->action == CommandLine::Action::help);
	for (const char *flag : {"--config", "--masq-chain", "--nomasq-all-reserved-ranges", "--enable-ipv6",
				 "--random-fully", "--to-ports", "--table", "--priority", "--dry-run", "--once", "--cleanup", "--v",
				 "--version", "--help"})
		CHECK_THAT(help->helpText, Catch::Contains(flag));
	CHECK_THAT(help->helpText, Catch::Contains("IP-MASQ-AGENT") && Catch::Contains("srcnat + 10") &&
					   Catch::Contains("/etc/config/ip-masq-agent"));
	CHECK(parse({"-h"})->action == CommandLine::Action::help);
	CHECK(parse({"--version"})->action == CommandLine::Action::version);
	CHECK(parse({"-version"})->action == CommandLine::Action::version);
}

TEST_CASE("effective flags are listed for the start-up log")
{
	auto cl = parse({"--enable-ipv6", "--to-ports=1024-2047"});
	REQUIRE(cl);
	CHECK_THAT(cl->effectiveFlags, Catch::VectorContains(std::string("--enable-ipv6=true")));
	CHECK_THAT(cl->effectiveFlags, Catch::VectorContains(std::string("--to-ports=1024-2047")));
	CHECK_THAT(cl->effectiveFlags, Catch::VectorContains(std::string("--masq-chain=IP-MASQ-AGENT")));
}

TEST_CASE("an empty value is a value: --health-addr= turns the endpoint off")
{
	CHECK(parseOk({}).healthAddr == ":10263");
	CHECK(parseOk({"--health-addr="}).healthAddr.empty());
	CHECK(parseOk({"-health-addr="}).healthAddr.empty());
	CHECK(parseOk({"--health-addr", ""}).healthAddr.empty());
	CHECK(parseOk({"--health-addr=127.0.0.1:9000"}).healthAddr == "127.0.0.1:9000");
	CHECK(parseOk({"--to-ports="}).ruleset.toPorts.empty());
	CHECK_THAT(parseError({"--health-addr=nonsense"}), Catch::Contains("--health-addr"));
}

TEST_CASE("upstream's klog flags and --version=raw are accepted, the klog ones with a warning")
{
	auto cl = parse({"--logtostderr", "--alsologtostderr=true", "--stderrthreshold=INFO",
			 "-log_dir=/tmp", "--vmodule=x=2", "--skip_headers", "--v=2"});
	REQUIRE(cl);
	CHECK(cl->options.verbosity == 2);
	REQUIRE(cl->warnings.size() == 1);
	CHECK_THAT(cl->warnings[0], Catch::Contains("--alsologtostderr") && Catch::Contains("--log_dir") &&
					    Catch::Contains("--logtostderr"));
	CHECK(parse({})->warnings.empty());
	CHECK(parse({"--version=raw"})->action == CommandLine::Action::version);
	CHECK(parse({"--version=false"})->action == CommandLine::Action::run);
	CHECK_THAT(parse({"--help"})->helpText, Catch::Contains("--alsologtostderr"));
}

TEST_CASE("a flag value containing Boost's placeholders is an error, not a hang")
{
	// Boost's what() substitutes values into "%value%" until none is left: never ends.
	CHECK_THAT(parseError({"--v=%value%"}), Catch::Contains("--v \"%value%\""));
	CHECK_THAT(parseError({"--enable-ipv6=%value%"}),
		   Catch::Contains("--enable-ipv6 \"%value%\"") && Catch::Contains("not a boolean"));
	CHECK_THAT(parseError({"--logtostderr=%value%"}), Catch::Contains("--logtostderr"));
	CHECK_THAT(parseError({"--%canonical_option%"}), Catch::Contains("unknown flag --%canonical_option%"));
	CHECK_THAT(parseError({"--config=a", "--config=%value%"}), Catch::Contains("more than once"));
	CHECK_THAT(parseError({"--config"}), Catch::Contains("--config needs a value"));
	CHECK_THAT(parseError({"--help=%value%"}), Catch::Contains("--help takes no value"));
}

TEST_CASE("flag values are escaped in errors and in the effective flags")
{
	const std::string error = parseError({"--to-ports=80\nerror: forged"});
	CHECK(error.find('\n') == std::string::npos);
	CHECK_THAT(error, Catch::Contains("\\n"));
	CHECK(parseError({"--priority=1\n2"}).find('\n') == std::string::npos);
	CHECK(parseError({"--v=1\n2"}).find('\n') == std::string::npos);
	CHECK(parseError({"--dry-run", "x\ny"}).find('\n') == std::string::npos);
	auto cl = parse({"--config=/etc/a\nb"});
	REQUIRE(cl);
	CHECK_THAT(cl->effectiveFlags, Catch::VectorContains(std::string("--config=/etc/a\\nb")));
}

TEST_CASE("--v: numbers are checked before they can overflow")
{
	CHECK(parseOk({"--v=2147483647"}).verbosity == 2147483647);
	CHECK_THAT(parseError({"--v=2147483648"}), Catch::Contains("at most 2147483647"));
	CHECK_THAT(parseError({"--v=99999999999999999999999"}), Catch::Contains("at most 2147483647"));
	CHECK_THAT(parseError({"--v=-1"}), Catch::Contains("cannot be negative"));
	CHECK_THAT(parseError({"--v=x"}), Catch::Contains("not a number"));
}

TEST_CASE("bools take Go's spellings")
{
	for (const char *yes : {"1", "t", "T", "true", "TRUE", "True"})
		CHECK(parseOk({(std::string("--enable-ipv6=") + yes).c_str()}).configFlags.enableIpv6);
	for (const char *no : {"0", "f", "F", "false", "FALSE", "False"})
		CHECK_FALSE(parseOk({(std::string("--random-fully=") + no).c_str()}).ruleset.randomFully);
}

TEST_CASE("--priority: the real bounds, not a wrong reason")
{
	CHECK(parseOk({"--priority=2000000000"}).ruleset.priority == 2000000000);
	CHECK_THAT(parseError({"--priority=srcnat - -9223372036854775807"}), Catch::Contains("without a sign"));
	CHECK_THAT(parseError({"--priority=3000000000"}), Catch::Contains("at most 2147483647"));
}

TEST_CASE("names nft cannot carry are refused at flag parsing, with the limit")
{
	const std::string longest(94, 'C'), tooLong(95, 'C');
	CHECK(parseOk({("--masq-chain=" + longest).c_str()}).ruleset.masqChain == longest);
	CHECK_THAT(parseError({("--masq-chain=" + tooLong).c_str()}),
		   Catch::Contains("at most 94 characters") && Catch::Contains("128"));
	const std::string table(255, 't'), tableTooLong(256, 't');
	CHECK(parseOk({("--table=" + table).c_str()}).ruleset.table == table);
	CHECK_THAT(parseError({("--table=" + tableTooLong).c_str()}), Catch::Contains("at most 255"));
}

TEST_CASE("--logging-format: text (the default) or json, anything else names the flag")
{
	CHECK(parseOk({}).loggingFormat == log::Format::text);
	CHECK(parseOk({"--logging-format=json"}).loggingFormat == log::Format::json);
	CHECK(parseOk({"-logging-format", "text"}).loggingFormat == log::Format::text);
	CHECK_THAT(parseError({"--logging-format=JSON"}),
		   Catch::Contains("--logging-format \"JSON\"") && Catch::Contains("text") &&
			   Catch::Contains("json"));
	const std::string forged = parseError({"--logging-format=x\nerror: forged"});
	CHECK(forged.find('\n') == std::string::npos);
	auto cl = parse({"--logging-format=json"});
	REQUIRE(cl);
	CHECK_THAT(cl->effectiveFlags, Catch::VectorContains(std::string("--logging-format=json")));
}

TEST_CASE("--config-dir: every Go spelling, and it replaces the default --config")
{
	for (auto args : std::vector<std::vector<const char *>>{{"--config-dir=/etc/config"},
								{"--config-dir", "/etc/config"},
								{"-config-dir=/etc/config"},
								{"-config-dir", "/etc/config"}})
		CHECK(parseOk(args).config == ConfigLocation::directory("/etc/config"));
	CHECK(parseOk({"--config=/x"}).config == ConfigLocation::file("/x"));

	auto cl = parse({"--config-dir=/etc/config"});
	REQUIRE(cl);
	CHECK(std::count(cl->effectiveFlags.begin(), cl->effectiveFlags.end(),
			 "--config-dir=/etc/config") == 1);
	CHECK(std::none_of(cl->effectiveFlags.begin(), cl->effectiveFlags.end(),
			   [](const std::string &flag) { return flag.rfind("--config=", 0) == 0; }));
	CHECK_THAT(cl->helpText, Catch::Contains("--config-dir"));
}

TEST_CASE("--config and --config-dir exclude each other; --config-dir needs a directory")
{
	for (auto args : std::vector<std::vector<const char *>>{
		     {"--config=/etc/config/ip-masq-agent", "--config-dir=/etc/config"},
		     {"-config-dir", "/etc/config", "-config", "/etc/config/ip-masq-agent"}})
		CHECK_THAT(parseError(args), Catch::Contains("--config \"/etc/config/ip-masq-agent\"") &&
						     Catch::Contains("--config-dir \"/etc/config\"") &&
						     Catch::Contains("exclude each other"));
	CHECK_THAT(parseError({"--config-dir="}), Catch::Contains("--config-dir needs a directory"));
}

TEST_CASE("--explain and --explain-source: repeatable addresses, a bad one names the flag")
{
	const AgentOptions o = parseOk({"--explain=10.1.2.3", "-explain", "2001:db8::1",
					"--explain-source=10.244.0.5", "--enable-ipv6"});
	REQUIRE(o.explain.size() == 2);
	CHECK(o.explain[0].toString() == "10.1.2.3");
	CHECK(o.explain[1].toString() == "2001:db8::1");
	REQUIRE(o.explainSources.size() == 1);
	CHECK(o.explainSources[0].toString() == "10.244.0.5");
	CHECK(parseOk({}).explain.empty());

	CHECK(parseError({"--explain=10.0.0.300"}) ==
	      "--explain: address \"10.0.0.300\" could not be parsed: it is not a valid IPv4 address "
	      "(write one address, such as 192.0.2.1)");
	CHECK(parseError({"--explain=10.0.0.0/8"}).starts_with("--explain: address \"10.0.0.0/8\" is a CIDR"));
	CHECK(parseError({"--explain="}).starts_with("--explain: address \"\" is empty"));
	CHECK(parseError({"--explain=10.0.0.1", "--explain-source=x\n"}).starts_with(
		"--explain-source: address \"x\\n\" could not be parsed"));
	CHECK(parseError({"--explain-source=10.0.0.1"}).starts_with("--explain-source needs --explain"));
	CHECK(parseError({"--explain=10.0.0.1", "--dry-run"}) ==
	      "--dry-run, --once, --cleanup, --explain and --snat-usage exclude each other: pick one");
}

TEST_CASE("--snat-usage is an action of its own, with the config's flags")
{
	CHECK_FALSE(parseOk({}).snatUsage);
	const AgentOptions o = parseOk({"--snat-usage", "--to-ports=40000-40099", "--enable-ipv6"});
	CHECK(o.snatUsage);
	REQUIRE(o.ruleset.toPorts.size() == 1);
	CHECK(o.ruleset.toPorts[0] == PortRange{40000, 40099});
	CHECK(parseError({"--snat-usage", "--once"}) ==
	      "--dry-run, --once, --cleanup, --explain and --snat-usage exclude each other: pick one");
	CHECK(parseError({"--snat-usage=maybe"}).starts_with("--snat-usage \"maybe\": not a boolean"));
}
