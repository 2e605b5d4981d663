// SPDX-License-Identifier: Apache-2.0
// Command-line flags with Boost.Program_options, accepting Go's flag spellings.
#include "ip-masq-agent/cli/options.h"
#include "ip-masq-agent/model/egress.h"
#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/daemon/health_server.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"

#include <cstdint>
#include <functional>
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
	if (destinations.empty() && o.explainPort)
		return fail("--explain-port needs --explain=ADDRESS: it says which port and protocol the "
			    "explained destinations are sent to");
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

// What the rows take in as text, for the checks that span several flags.
struct FlagTexts {
	std::string configFile, configDir, version;
	std::vector<std::string> explain, explainSources;
};
using Values = std::vector<std::string>;

// One flag, described once: its name, its default as --help shows it (none: absent unless
// given), its help, how its texts become options (an error names the flag and the value),
// and what the start-up line says of it (none: nothing).
struct FlagRow {
	enum class Kind {
		value, // --name=TEXT
		values, // repeatable
		boolean, // --name alone is true; Go's bool spellings
		optionalValue, // --name alone is "true"
	};
	const char *name;
	std::optional<std::string> defaultText;
	Kind kind;
	const char *help;
	std::function<Status(AgentOptions &, FlagTexts &, const Values &)> apply;
	std::function<std::optional<std::string>(const AgentOptions &)> effective = nullptr;
	// The whole "--name=value" when it is not that (--config says --config-dir=DIR too).
	std::function<std::string(const AgentOptions &)> logged = nullptr;

	// Boost's description of it: every value is taken as text.
	po::value_semantic *semantic(std::vector<std::string> &into) const
	{
		auto *v = po::value<std::vector<std::string>>(&into);
		if (defaultText)
			v->default_value({*defaultText}, *defaultText);
		if (kind == Kind::boolean || kind == Kind::optionalValue)
			v->implicit_value({"true"}, "true");
		if (kind != Kind::values)
			v->notifier([name = name](const std::vector<std::string> &given) {
				// Boost collects repeats into the vector; a flag given twice is an error.
				if (given.size() > 1) {
					po::multiple_occurrences twice;
					twice.set_option_name(name);
					twice.set_prefix(po::command_line_style::allow_long);
					throw twice;
				}
			});
		return v;
	}
};

// A bool flag whose value is `field(options)`: one generic accessor serves the row's
// setter (on AgentOptions &) and its start-up line (on const AgentOptions &).
template<typename Field>
FlagRow boolRow(const char *name, bool defaultValue, const char *help, Field field)
{
	return FlagRow{name, boolText(defaultValue), FlagRow::Kind::boolean, help,
		       [name, field](AgentOptions &o, FlagTexts &, const Values &v) -> Status {
			       auto value = boolFlag(name, v.back());
			       if (!value)
				       return fail(value.error());
			       field(o) = *value;
			       return {};
		       },
		       [field](const AgentOptions &o) { return std::optional(boolText(field(o))); }};
}

// A flag whose text is converted by `parse` (its error names the value) into `field(options)`.
template<typename Parse, typename Field>
auto parsedInto(Parse parse, Field field)
{
	return [parse, field](AgentOptions &o, FlagTexts &, const Values &v) -> Status {
		auto value = parse(v.back());
		if (!value)
			return fail(value.error());
		field(o) = std::move(*value);
		return {};
	};
}

// A flag taken in as text, into `field(texts)`, for the checks after every row.
template<typename Field>
auto textInto(Field field)
{
	return [field](AgentOptions &, FlagTexts &texts, const Values &v) {
		field(texts, v);
		return Status{};
	};
}

std::string toPortsText(const AgentOptions &o)
{
	std::vector<std::string> ranges;
	for (const PortRange &range : o.ruleset.toPorts)
		ranges.push_back(range.toString());
	return fmt::format("{}", fmt::join(ranges, ","));
}

Status healthAddrFlag(AgentOptions &o, FlagTexts &, const Values &v)
{
	o.healthAddr = v.back();
	if (o.healthAddr.empty())
		return {};
	auto address = parseListenAddress(o.healthAddr);
	return address ? Status{} : fail(address.error());
}

// clang-format off
const std::vector<FlagRow> kFlagRows = {
	{"config", kDefaultConfigPath, FlagRow::Kind::value,
	 "Config file (YAML or JSON). Absent means all defaults.",
	 textInto([](FlagTexts &t, const Values &v) { t.configFile = v.back(); }),
	 [](const AgentOptions &) { return std::optional(std::string()); },
	 [](const AgentOptions &o) { return o.config.flag(); }}, // or --config-dir=DIR
	{"config-dir", std::nullopt, FlagRow::Kind::value,
	 "Instead of --config: merge every file in this directory whose name starts with "
	 "\"ip-masq\" (e.g. a projected volume of several ConfigMaps). Missing or empty means "
	 "all defaults.",
	 textInto([](FlagTexts &t, const Values &v) { t.configDir = v.back(); })},
	{"masq-chain", kDefaultMasqChain, FlagRow::Kind::value,
	 "Name of the chain holding the masquerade rules.",
	 [](AgentOptions &o, FlagTexts &, const Values &v) { o.ruleset.masqChain = v.back(); return Status{}; },
	 [](const AgentOptions &o) { return std::optional(o.ruleset.masqChain); }},
	boolRow("nomasq-all-reserved-ranges", false,
		"Also keep all reserved IPv4 ranges (RFC 6598, 5737, 2544, 7526, 6890, class E) "
		"un-NATed when the config gives no nonMasqueradeCIDRs.",
		[](auto &o) -> auto & { return o.configFlags.nomasqAllReservedRanges; }),
	boolRow("enable-ipv6", false, "Also masquerade IPv6, with fe80::/10 and IPv6 "
		"nonMasqueradeCIDRs un-NATed.",
		[](auto &o) -> auto & { return o.configFlags.enableIpv6; }),
	boolRow("strict-config", false, "Refuse a config file with an unknown key (by default the "
		"key is ignored with a warning that names the key it most likely means, as upstream "
		"ignores it).",
		[](auto &o) -> auto & { return o.configFlags.strictKeys; }),
	boolRow("random-fully", true, "Masquerade with fully randomized source ports.",
		[](auto &o) -> auto & { return o.ruleset.randomFully; }),
	boolRow("connection-counters", true, "Count new connections per decision in named "
		"counters of the table (ip_masq_agent_connections_total); false leaves them out.",
		[](auto &o) -> auto & { return o.ruleset.connectionCounters; }),
	{"to-ports", "", FlagRow::Kind::value,
	 "Masquerade tcp, udp and sctp to these source ports only, e.g. \"1024-29999,32768-65535\".",
	 parsedInto(parsePortRanges, [](AgentOptions &o) -> auto & { return o.ruleset.toPorts; }),
	 [](const AgentOptions &o) { return std::optional(toPortsText(o)); }},
	{"table", kDefaultTableName, FlagRow::Kind::value,
	 "Name of the agent's own nftables table (family inet).",
	 [](AgentOptions &o, FlagTexts &, const Values &v) { o.ruleset.table = v.back(); return Status{}; },
	 [](const AgentOptions &o) { return std::optional(o.ruleset.table); }},
	{"priority", formatChainPriority(kDefaultPriority), FlagRow::Kind::value,
	 "Priority of the nat postrouting base chain (a number, or e.g. \"srcnat + 10\").",
	 parsedInto(parseChainPriority, [](AgentOptions &o) -> auto & { return o.ruleset.priority; }),
	 [](const AgentOptions &o) { return std::optional(formatChainPriority(o.ruleset.priority)); }},
	boolRow("dry-run", false, "Print the ruleset as nft -f input and exit; needs no privileges.",
		[](auto &o) -> auto & { return o.dryRun; }),
	boolRow("once", false, "Apply the ruleset once and exit; the exit status says whether it worked.",
		[](auto &o) -> auto & { return o.once; }),
	boolRow("cleanup", false, "Delete the agent's table, and nothing else, and exit.",
		[](auto &o) -> auto & { return o.cleanup; }),
	boolRow("snat-usage", false, "Print how many source ports are in use toward the "
		"busiest destinations, of those the agent's rules (by this config and these "
		"flags) can give, and which clients (pods) hold them, and exit. Reads conntrack: "
		"needs CAP_NET_ADMIN.",
		[](auto &o) -> auto & { return o.snatUsage; }),
	{"explain", std::nullopt, FlagRow::Kind::values,
	 "Say why this destination address is (not) masqueraded and exit; repeatable. "
	 "Needs no privileges; with CAP_NET_ADMIN also checks the kernel's table.",
	 textInto([](FlagTexts &t, const Values &v) { t.explain = v; })},
	{"explain-source", std::nullopt, FlagRow::Kind::values,
	 "A source address for --explain, checked against masqueradeSourceCIDRs; repeatable.",
	 textInto([](FlagTexts &t, const Values &v) { t.explainSources = v; })},
	{"explain-interface", std::nullopt, FlagRow::Kind::value,
	 "The output interface for --explain, checked against outputInterface and "
	 "nonMasqueradeInterfaces.",
	 [](AgentOptions &o, FlagTexts &, const Values &v) { o.explainInterface = v.back(); return Status{}; }},
	{"explain-port", std::nullopt, FlagRow::Kind::value,
	 "The destination port and protocol for --explain (443/tcp): other tables' rules that "
	 "match on them are then decided.",
	 [](AgentOptions &o, FlagTexts &, const Values &v) -> Status {
		 auto port = parsePortProtocol(v.back());
		 if (!port)
			 return fail(port.error().withContext("--explain-port: "));
		 o.explainPort = *port;
		 return {};
	 }},
	{"health-addr", kDefaultHealthAddr, FlagRow::Kind::value,
	 "Serve /livez, /readyz, /healthz, /metrics and /snat-usage on this host:port (\":port\" "
	 "= every address); empty turns it off.",
	 healthAddrFlag, [](const AgentOptions &o) { return std::optional(o.healthAddr); }},
	{"v", "0", FlagRow::Kind::value,
	 "Log verbosity; 1 or more adds debug messages (-v=2 and --v 2 are accepted too).",
	 parsedInto(verbosityFlag, [](AgentOptions &o) -> auto & { return o.verbosity; }),
	 [](const AgentOptions &o) { return std::optional(std::to_string(o.verbosity)); }},
	{"logging-format", "text", FlagRow::Kind::value,
	 "Log format: \"text\" (one line per message) or \"json\" (one JSON object per line).",
	 parsedInto(loggingFormatFlag, [](AgentOptions &o) -> auto & { return o.loggingFormat; }),
	 [](const AgentOptions &o) {
		 return std::optional<std::string>(o.loggingFormat == log::Format::json ? "json" : "text");
	 }},
	{"version", std::nullopt, FlagRow::Kind::optionalValue,
	 "Print the version and exit (upstream's --version=raw works too).",
	 textInto([](FlagTexts &t, const Values &v) { t.version = v.back(); })},
};
// clang-format on

// Upstream registers klog's flags, and manifests written for it carry some of them. They
// are accepted and ignored (logs always go to stderr), with a warning.
struct KlogFlags {
	std::vector<std::string> given;
	std::map<std::string, std::string> bools; // their texts, checked as Go bools
};

po::options_description klogOptions(KlogFlags &klog)
{
	po::options_description out("Accepted for upstream (klog) compatibility and ignored");
	const auto note = [&klog](const char *name) {
		return [&klog, name](const std::string &) { klog.given.push_back(name); };
	};
	for (const char *name : {"logtostderr", "alsologtostderr", "skip_headers", "skip_log_headers",
				 "add_dir_header", "one_output"})
		out.add_options()(name, po::value(&klog.bools[name])->implicit_value("true")->notifier(note(name)), "");
	for (const char *name : {"stderrthreshold", "log_dir", "log_file", "log_file_max_size",
				 "vmodule", "log_backtrace_at"})
		out.add_options()(name, po::value<std::string>()->notifier(note(name)), "");
	return out;
}

// Every flag for Boost, each row's texts collected into `given`; --help's text.
po::options_description describeFlags(std::map<std::string, Values> &given, KlogFlags &klog,
				      std::string &helpText)
{
	po::options_description desc("Usage: ip-masq-agent [flags]\n\n"
				     "Keeps pod traffic to non-masquerade destinations un-NATed and "
				     "masquerades the rest,\nusing its own nftables table.\n\nFlags");
	for (const FlagRow &row : kFlagRows)
		desc.add_options()(row.name, row.semantic(given[row.name]), row.help);
	desc.add_options()("help,h", "Print this help and exit.");
	std::ostringstream help;
	help << desc;
	help << "\nAlso accepted and ignored, for manifests written for upstream: --logtostderr, "
		"--alsologtostderr,\n--stderrthreshold, --log_dir, --log_file, --log_file_max_size, "
		"--vmodule, --log_backtrace_at,\n--skip_headers, --skip_log_headers, --add_dir_header, "
		"--one_output. Logs always go to stderr.\n";
	helpText = help.str();
	po::options_description all;
	all.add(desc).add(klogOptions(klog));
	return all;
}

// Boost's parse of the words, in our words on error.
Result<po::variables_map> parseWords(int argc, const char *const argv[],
				     const po::options_description &all)
{
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
	return vm;
}

// The checks that span several flags, once every row is applied.
Status checkTogether(const po::variables_map &vm, const FlagTexts &texts, const KlogFlags &klog,
		     AgentOptions &o)
{
	for (const auto &[flag, text] : klog.bools)
		if (vm.count(flag))
			if (auto value = boolFlag(flag, text); !value)
				return fail(value.error());
	auto location = configLocation(vm, texts.configFile, texts.configDir);
	if (!location)
		return fail(location.error());
	o.config = std::move(*location);
	o.ruleset.enableIpv6 = o.configFlags.enableIpv6;
	if (auto status = validateRulesetOptions(o.ruleset); !status)
		return status;
	if (int(o.dryRun) + int(o.once) + int(o.cleanup) + int(!texts.explain.empty()) +
		    int(o.snatUsage) > 1)
		return fail("--dry-run, --once, --cleanup, --explain and --snat-usage exclude each "
			    "other: pick one");
	return explainFlags(texts.explain, texts.explainSources, o);
}

// The start-up line's "--name=value" of every row that has one; values from outside are
// escaped.
std::vector<std::string> effectiveFlags(const AgentOptions &o)
{
	std::vector<std::string> out;
	for (const FlagRow &row : kFlagRows)
		if (row.effective)
			if (auto value = row.effective(o))
				out.push_back(row.logged ? row.logged(o)
							 : fmt::format("--{}={}", row.name, escaped(*value)));
	return out;
}

} // namespace

Result<CommandLine> parseCommandLine(int argc, const char *const argv[])
{
	CommandLine cl;
	std::map<std::string, Values> given;
	KlogFlags klog;
	const po::options_description all = describeFlags(given, klog, cl.helpText);
	const auto vm = parseWords(argc, argv, all);
	if (!vm)
		return fail(vm.error());
	if (vm->count("help")) {
		cl.action = CommandLine::Action::help;
		return cl;
	}
	FlagTexts texts;
	for (const FlagRow &row : kFlagRows)
		if (const Values &values = given[row.name]; !values.empty()) // given, or a default
			if (auto status = row.apply(cl.options, texts, values); !status)
				return fail(status.error());
	if (vm->count("version") && texts.version != "false") {
		cl.action = CommandLine::Action::version;
		return cl;
	}
	if (auto status = checkTogether(*vm, texts, klog, cl.options); !status)
		return fail(status.error());
	if (!klog.given.empty())
		cl.warnings.push_back(fmt::format("ignoring upstream's klog flags --{}: logs always go "
						  "to stderr", fmt::join(klog.given, ", --")));
	cl.effectiveFlags = effectiveFlags(cl.options);
	return cl;
}

} // namespace ipmasq
