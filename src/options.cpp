// SPDX-License-Identifier: Apache-2.0
// Command-line flags with Boost.Program_options, accepting Go's flag spellings.
#include "ip-masq-agent/options.h"
#include "ip-masq-agent/egress.h"
#include "ip-masq-agent/escape.h"
#include "ip-masq-agent/health_server.h"
#include "ip-masq-agent/ruleset_mapping.h"

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>
#include <utility>

#include <boost/program_options.hpp>
#include <fmt/format.h>

namespace po = boost::program_options;

namespace ipmasq {

namespace {

// Go's flag package treats "-flag" and "--flag" alike; Boost wants "--" for long names.
// Rewrite single-dash long flags (and -v=2) so manifests written for upstream work as is.
std::vector<std::string> goStyleArguments(int argc, const char *const argv[])
{
	std::vector<std::string> args;
	bool positional = false;
	for (int i = 1; i < argc; i++) {
		std::string arg = argv[i];
		if (arg == "--")
			positional = true;
		if (!positional && arg.size() >= 2 && arg[0] == '-' && arg[1] != '-' &&
		    !(arg[1] >= '0' && arg[1] <= '9') && !(arg.size() == 2 && arg[1] == 'h'))
			arg = "-" + arg;
		// Go takes "--flag=" as an empty value ("--health-addr=" turns the endpoint
		// off); Boost wants the empty value as a word of its own.
		if (!positional && arg.size() > 3 && arg.rfind("--", 0) == 0 && arg.back() == '=' &&
		    arg.find('=') == arg.size() - 1) {
			args.push_back(arg.substr(0, arg.size() - 1));
			args.emplace_back();
			continue;
		}
		args.push_back(arg);
	}
	return args;
}

std::string boolText(bool value)
{
	return value ? "true" : "false";
}

// Go's strconv.ParseBool, which its flag package uses for bool flags.
std::optional<bool> parseGoBool(std::string_view text)
{
	for (const std::string_view yes : {"1", "t", "T", "true", "TRUE", "True"})
		if (text == yes)
			return true;
	for (const std::string_view no : {"0", "f", "F", "false", "FALSE", "False"})
		if (text == no)
			return false;
	return std::nullopt;
}

Result<bool> boolFlag(std::string_view flag, const std::string &text)
{
	if (const auto value = parseGoBool(text))
		return *value;
	return fail(fmt::format("--{} {}: not a boolean (write --{}, --{}=true or --{}=false)",
				flag, quoted(text), flag, flag, flag));
}

// -v: a decimal number from 0 to the largest int32 (klog's Level), checked digit by
// digit before it can overflow.
Result<int> verbosityFlag(const std::string &text)
{
	const auto invalid = [&](std::string_view why) {
		return fail(fmt::format("--v {}: {} (write a verbosity from 0 to {}, e.g. --v=2)",
					quoted(text), why, std::numeric_limits<int32_t>::max()));
	};
	std::string_view digits = text;
	if (!digits.empty() && digits[0] == '+')
		digits.remove_prefix(1);
	else if (!digits.empty() && digits[0] == '-')
		return invalid("verbosity cannot be negative");
	if (digits.empty())
		return invalid("not a number");
	int64_t value = 0;
	for (const char c : digits) {
		if (c < '0' || c > '9')
			return invalid("not a number");
		value = value * 10 + (c - '0');
		if (value > std::numeric_limits<int32_t>::max())
			return invalid(fmt::format("verbosity must be at most {}",
						   std::numeric_limits<int32_t>::max()));
	}
	return static_cast<int>(value);
}

// --logging-format: Kubernetes components' flag and values.
Result<log::Format> loggingFormatFlag(const std::string &text)
{
	if (text == "text")
		return log::Format::text;
	if (text == "json")
		return log::Format::json;
	return fail(fmt::format("--logging-format {}: unknown format (write --logging-format=text "
				"or --logging-format=json)", quoted(text)));
}

// The message for an error Boost found, from the option's name and our own words only:
// what() substitutes the user's text into a template repeatedly (a value containing
// "%value%" never terminates), so it is never called.
std::string flagError(const po::error_with_option_name &e)
{
	const std::string name = escaped(e.get_option_name());
	if (dynamic_cast<const po::unknown_option *>(&e))
		return fmt::format("unknown flag {} (see --help for the flags)", name);
	if (dynamic_cast<const po::multiple_occurrences *>(&e))
		return fmt::format("flag {} is given more than once: give it once (see --help)", name);
	if (const auto *syntax = dynamic_cast<const po::invalid_command_line_syntax *>(&e)) {
		switch (syntax->kind()) {
		case po::invalid_syntax::missing_parameter:
			return fmt::format("flag {} needs a value: write {}=VALUE (see --help)", name,
					   name);
		case po::invalid_syntax::extra_parameter:
			return fmt::format("flag {} takes no value (see --help)", name);
		default:
			break;
		}
	}
	return fmt::format("flag {} cannot be parsed: write --flag=value (see --help)", name);
}

// --config or --config-dir. Only an explicit --config excludes --config-dir: the
// default file is what --config-dir replaces.
Result<ConfigLocation> configLocation(const po::variables_map &vm, const std::string &configFile,
				      const std::string &configDir)
{
	if (!vm.count("config-dir"))
		return ConfigLocation::file(configFile);
	if (!vm["config"].defaulted())
		return fail(fmt::format("--config {} and --config-dir {} exclude each other: give "
					"--config for one file, or --config-dir for a directory of files "
					"merged, not both", ipmasq::quoted(configFile), ipmasq::quoted(configDir)));
	if (configDir.empty())
		return fail("--config-dir needs a directory: write --config-dir=DIR (see --help)");
	return ConfigLocation::directory(configDir);
}

// --explain and --explain-source: addresses, each error naming the flag and the value.
Status explainFlags(const std::vector<std::string> &destinations,
		    const std::vector<std::string> &sources, AgentOptions &o)
{
	if (destinations.empty() && !sources.empty())
		return fail("--explain-source needs --explain=ADDRESS: it says which source the "
			    "explained destinations are sent from");
	if (destinations.empty() && !o.explainInterface.empty())
		return fail("--explain-interface needs --explain=ADDRESS: it says which interface the "
			    "explained destinations leave through");
	if (!o.explainInterface.empty()) {
		auto name = parseInterfacePattern(o.explainInterface);
		if (!name)
			return fail(name.error().withContext("--explain-interface: "));
		if (name->wildcard)
			return fail(fmt::format("--explain-interface: {} is a wildcard; name the one "
						"interface the traffic leaves through",
						quoted(o.explainInterface)));
	}
	for (const auto &[flag, texts, target] :
	     {std::tuple{"explain", &destinations, &o.explain},
	      std::tuple{"explain-source", &sources, &o.explainSources}})
		for (const std::string &text : *texts) {
			auto address = parseAddress(text);
			if (!address)
				return fail(address.error().withContext(fmt::format("--{}: ", flag)));
			target->push_back(*address);
		}
	return {};
}

} // namespace

Result<CommandLine> parseCommandLine(int argc, const char *const argv[])
{
	CommandLine cl;
	AgentOptions &o = cl.options;
	// Every value is taken as text and converted here, so that each error names the
	// flag and the offending value in our words (see flagError).
	std::string configFile = kDefaultConfigPath, configDir;
	std::string toPorts, priority = formatChainPriority(kDefaultPriority);
	std::string version, verbosity = "0", loggingFormat = "text";
	std::map<std::string, std::string> bools;
	std::vector<std::string> explainTexts, explainSourceTexts;
	const auto boolValue = [&bools](const char *name, const char *defaultValue) {
		return po::value(&bools[name])->default_value(defaultValue)->implicit_value("true");
	};

	po::options_description desc("Usage: ip-masq-agent [flags]\n\n"
				     "Keeps pod traffic to non-masquerade destinations un-NATed and "
				     "masquerades the rest,\nusing its own nftables table.\n\nFlags");
	// clang-format off
	desc.add_options()
		("config", po::value(&configFile)->default_value(configFile),
		 "Config file (YAML or JSON). Absent means all defaults.")
		("config-dir", po::value(&configDir),
		 "Instead of --config: merge every file in this directory whose name starts with "
		 "\"ip-masq\" (e.g. a projected volume of several ConfigMaps). Missing or empty means "
		 "all defaults.")
		("masq-chain", po::value(&o.ruleset.masqChain)->default_value(o.ruleset.masqChain),
		 "Name of the chain holding the masquerade rules.")
		("nomasq-all-reserved-ranges", boolValue("nomasq-all-reserved-ranges", "false"),
		 "Also keep all reserved IPv4 ranges (RFC 6598, 5737, 2544, 7526, 6890, class E) un-NATed "
		 "when the config gives no nonMasqueradeCIDRs.")
		("enable-ipv6", boolValue("enable-ipv6", "false"),
		 "Also masquerade IPv6, with fe80::/10 and IPv6 nonMasqueradeCIDRs un-NATed.")
		("random-fully", boolValue("random-fully", "true"),
		 "Masquerade with fully randomized source ports.")
		("connection-counters", boolValue("connection-counters", "true"),
		 "Count new connections per decision in named counters of the table "
		 "(ip_masq_agent_connections_total); false leaves them out.")
		("to-ports", po::value(&toPorts)->default_value(""),
		 "Masquerade tcp, udp and sctp to these source ports only, e.g. \"1024-29999,32768-65535\".")
		("table", po::value(&o.ruleset.table)->default_value(o.ruleset.table),
		 "Name of the agent's own nftables table (family inet).")
		("priority", po::value(&priority)->default_value(priority),
		 "Priority of the nat postrouting base chain (a number, or e.g. \"srcnat + 10\").")
		("dry-run", boolValue("dry-run", "false"),
		 "Print the ruleset as nft -f input and exit; needs no privileges.")
		("once", boolValue("once", "false"),
		 "Apply the ruleset once and exit; the exit status says whether it worked.")
		("cleanup", boolValue("cleanup", "false"),
		 "Delete the agent's table, and nothing else, and exit.")
		("explain", po::value(&explainTexts),
		 "Say why this destination address is (not) masqueraded and exit; repeatable. "
		 "Needs no privileges; with CAP_NET_ADMIN also checks the kernel's table.")
		("explain-source", po::value(&explainSourceTexts),
		 "A source address for --explain, checked against masqueradeSourceCIDRs; repeatable.")
		("explain-interface", po::value(&o.explainInterface),
		 "The output interface for --explain, checked against outputInterface and "
		 "nonMasqueradeInterfaces.")
		("health-addr", po::value(&o.healthAddr)->default_value(kDefaultHealthAddr),
		 "Serve /livez, /readyz, /healthz and /metrics on this host:port (\":port\" = every address); "
		 "empty turns it off.")
		("v", po::value(&verbosity)->default_value("0"),
		 "Log verbosity; 1 or more adds debug messages (-v=2 and --v 2 are accepted too).")
		("logging-format", po::value(&loggingFormat)->default_value(loggingFormat),
		 "Log format: \"text\" (one line per message) or \"json\" (one JSON object per line).")
		("version", po::value(&version)->implicit_value("true"),
		 "Print the version and exit (upstream's --version=raw works too).")
		("help,h", "Print this help and exit.");
	// clang-format on

	// Upstream registers klog's flags, and manifests written for it carry some of them.
	// They are accepted and ignored (logs always go to stderr), with a warning.
	po::options_description klog("Accepted for upstream (klog) compatibility and ignored");
	std::vector<std::string> klogGiven;
	std::map<std::string, std::string> klogBools;
	const auto klogBool = [&](const char *name) {
		klog.add_options()(name, po::value(&klogBools[name])->implicit_value("true")->notifier(
						 [&klogGiven, name](const std::string &) { klogGiven.push_back(name); }),
				   "");
	};
	const auto klogString = [&](const char *name) {
		klog.add_options()(name, po::value<std::string>()->notifier(
						 [&klogGiven, name](const std::string &) { klogGiven.push_back(name); }),
				   "");
	};
	for (const char *name : {"logtostderr", "alsologtostderr", "skip_headers", "skip_log_headers",
				 "add_dir_header", "one_output"})
		klogBool(name);
	for (const char *name : {"stderrthreshold", "log_dir", "log_file", "log_file_max_size",
				 "vmodule", "log_backtrace_at"})
		klogString(name);

	std::ostringstream help;
	help << desc;
	help << "\nAlso accepted and ignored, for manifests written for upstream: --logtostderr, "
		"--alsologtostderr,\n--stderrthreshold, --log_dir, --log_file, --log_file_max_size, "
		"--vmodule, --log_backtrace_at,\n--skip_headers, --skip_log_headers, --add_dir_header, "
		"--one_output. Logs always go to stderr.\n";
	cl.helpText = help.str();
	po::options_description all;
	all.add(desc).add(klog);

	po::variables_map vm;
	try {
		const auto parsed = po::command_line_parser(goStyleArguments(argc, argv))
					    .options(all)
					    .style(po::command_line_style::default_style &
						   ~po::command_line_style::allow_guessing)
					    .run();
		// Go's flag package stops at the first non-flag word and ignores the rest,
		// which hides mistakes such as "--enable-ipv6 false"; we refuse instead.
		for (const auto &option : parsed.options)
			if (option.position_key >= 0 || option.string_key.empty())
				return fail(fmt::format("unexpected argument {}: flags take values "
							"as --flag=value (bools: --flag=false) (see --help)",
							quoted(option.original_tokens.empty()
								       ? ""
								       : option.original_tokens.front())));
		po::store(parsed, vm);
		po::notify(vm);
	} catch (const po::error_with_option_name &e) {
		return fail(flagError(e));
	} catch (const po::error &) {
		// Never e.what(): see flagError.
		return fail("the command line cannot be parsed: write flags as --flag=value "
			    "(see --help)");
	}

	if (vm.count("help")) {
		cl.action = CommandLine::Action::help;
		return cl;
	}
	if (vm.count("version") && version != "false") {
		cl.action = CommandLine::Action::version;
		return cl;
	}

	for (const auto &[flag, target] :
	     {std::pair<const char *, bool *>{"nomasq-all-reserved-ranges",
					       &o.configFlags.nomasqAllReservedRanges},
	      {"enable-ipv6", &o.configFlags.enableIpv6},
	      {"random-fully", &o.ruleset.randomFully},
	      {"connection-counters", &o.ruleset.connectionCounters},
	      {"dry-run", &o.dryRun},
	      {"once", &o.once},
	      {"cleanup", &o.cleanup}}) {
		auto value = boolFlag(flag, bools[flag]);
		if (!value)
			return fail(value.error());
		*target = *value;
	}
	for (const auto &[flag, text] : klogBools)
		if (vm.count(flag))
			if (auto value = boolFlag(flag, text); !value)
				return fail(value.error());
	auto location = configLocation(vm, configFile, configDir);
	if (!location)
		return fail(location.error());
	o.config = std::move(*location);
	auto level = verbosityFlag(verbosity);
	if (!level)
		return fail(level.error());
	o.verbosity = *level;
	auto format = loggingFormatFlag(loggingFormat);
	if (!format)
		return fail(format.error());
	o.loggingFormat = *format;

	auto ports = parsePortRanges(toPorts);
	if (!ports)
		return fail(ports.error());
	o.ruleset.toPorts = std::move(*ports);
	auto prio = parseChainPriority(priority);
	if (!prio)
		return fail(prio.error());
	o.ruleset.priority = *prio;
	o.ruleset.enableIpv6 = o.configFlags.enableIpv6;
	if (auto status = validateRulesetOptions(o.ruleset); !status)
		return fail(status.error());
	if (int(o.dryRun) + int(o.once) + int(o.cleanup) + int(!explainTexts.empty()) > 1)
		return fail("--dry-run, --once, --cleanup and --explain exclude each other: pick one");
	if (auto status = explainFlags(explainTexts, explainSourceTexts, o); !status)
		return fail(status.error());
	if (!o.healthAddr.empty())
		if (auto address = parseListenAddress(o.healthAddr); !address)
			return fail(address.error());
	if (!klogGiven.empty())
		cl.warnings.push_back(fmt::format("ignoring upstream's klog flags --{}: logs always go "
						  "to stderr", fmt::join(klogGiven, ", --")));

	// Values from outside are escaped: these go into the start-up log line.
	cl.effectiveFlags = {
		o.config.flag(),
		fmt::format("--masq-chain={}", o.ruleset.masqChain),
		fmt::format("--nomasq-all-reserved-ranges={}", boolText(o.configFlags.nomasqAllReservedRanges)),
		fmt::format("--enable-ipv6={}", boolText(o.configFlags.enableIpv6)),
		fmt::format("--random-fully={}", boolText(o.ruleset.randomFully)),
		fmt::format("--connection-counters={}", boolText(o.ruleset.connectionCounters)),
		fmt::format("--to-ports={}", escaped(toPorts)),
		fmt::format("--table={}", o.ruleset.table),
		fmt::format("--priority={}", formatChainPriority(o.ruleset.priority)),
		fmt::format("--dry-run={}", boolText(o.dryRun)),
		fmt::format("--once={}", boolText(o.once)),
		fmt::format("--cleanup={}", boolText(o.cleanup)),
		fmt::format("--health-addr={}", escaped(o.healthAddr)),
		fmt::format("--v={}", o.verbosity),
		fmt::format("--logging-format={}", loggingFormat),
	};
	return cl;
}

} // namespace ipmasq
