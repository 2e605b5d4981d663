// SPDX-License-Identifier: Apache-2.0
// Command-line flags with Boost.Program_options, accepting Go's flag spellings.
#include "ip-masq-agent/options.h"
#include "ip-masq-agent/health_server.h"

#include <sstream>

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

} // namespace

Result<CommandLine> parseCommandLine(int argc, const char *const argv[])
{
	CommandLine cl;
	AgentOptions &o = cl.options;
	std::string toPorts, priority = formatChainPriority(kDefaultPriority);
	std::string version;

	po::options_description desc("Usage: ip-masq-agent [flags]\n\n"
				     "Keeps pod traffic to non-masquerade destinations un-NATed and "
				     "masquerades the rest,\nusing its own nftables table.\n\nFlags");
	// clang-format off
	desc.add_options()
		("config", po::value(&o.configPath)->default_value(o.configPath),
		 "Config file (YAML or JSON). Absent means all defaults.")
		("masq-chain", po::value(&o.ruleset.masqChain)->default_value(o.ruleset.masqChain),
		 "Name of the chain holding the masquerade rules.")
		("nomasq-all-reserved-ranges",
		 po::value(&o.configFlags.nomasqAllReservedRanges)->default_value(false, "false")->implicit_value(true, "true"),
		 "Also keep all reserved IPv4 ranges (RFC 6598, 5737, 2544, 7526, 6890, class E) un-NATed "
		 "when the config gives no nonMasqueradeCIDRs.")
		("enable-ipv6", po::value(&o.configFlags.enableIpv6)->default_value(false, "false")->implicit_value(true, "true"),
		 "Also masquerade IPv6, with fe80::/10 and IPv6 nonMasqueradeCIDRs un-NATed.")
		("random-fully", po::value(&o.ruleset.randomFully)->default_value(true, "true")->implicit_value(true, "true"),
		 "Masquerade with fully randomized source ports.")
		("to-ports", po::value(&toPorts)->default_value(""),
		 "Masquerade tcp, udp and sctp to these source ports only, e.g. \"1024-29999,32768-65535\".")
		("table", po::value(&o.ruleset.table)->default_value(o.ruleset.table),
		 "Name of the agent's own nftables table (family inet).")
		("priority", po::value(&priority)->default_value(priority),
		 "Priority of the nat postrouting base chain (a number, or e.g. \"srcnat + 10\").")
		("dry-run", po::value(&o.dryRun)->default_value(false, "false")->implicit_value(true, "true"),
		 "Print the ruleset as nft -f input and exit; needs no privileges.")
		("once", po::value(&o.once)->default_value(false, "false")->implicit_value(true, "true"),
		 "Apply the ruleset once and exit; the exit status says whether it worked.")
		("cleanup", po::value(&o.cleanup)->default_value(false, "false")->implicit_value(true, "true"),
		 "Delete the agent's table, and nothing else, and exit.")
		("health-addr", po::value(&o.healthAddr)->default_value(kDefaultHealthAddr),
		 "Serve /healthz and /metrics on this host:port (\":port\" = every address); "
		 "empty turns it off.")
		("v", po::value(&o.verbosity)->default_value(0),
		 "Log verbosity; 1 or more adds debug messages (-v=2 and --v 2 are accepted too).")
		("version", po::value(&version)->implicit_value("true"),
		 "Print the version and exit (upstream's --version=raw works too).")
		("help,h", "Print this help and exit.");
	// clang-format on

	// Upstream registers klog's flags, and manifests written for it carry some of them.
	// They are accepted and ignored (logs always go to stderr), with a warning.
	po::options_description klog("Accepted for upstream (klog) compatibility and ignored");
	std::vector<std::string> klogGiven;
	const auto klogBool = [&](const char *name) {
		klog.add_options()(name, po::value<bool>()->implicit_value(true, "true")->notifier(
						 [&klogGiven, name](bool) { klogGiven.push_back(name); }),
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
				return fail(fmt::format("unexpected argument \"{}\": flags take values "
							"as --flag=value (bools: --flag=false) (see --help)",
							option.original_tokens.empty()
								? ""
								: option.original_tokens.front()));
		po::store(parsed, vm);
		po::notify(vm);
	} catch (const po::unknown_option &e) {
		return fail(fmt::format("unknown flag {} (see --help for the flags)",
					e.get_option_name()));
	} catch (const po::error &e) {
		return fail(fmt::format("{} (see --help)", e.what()));
	}

	if (vm.count("help")) {
		cl.action = CommandLine::Action::help;
		return cl;
	}
	if (vm.count("version") && version != "false") {
		cl.action = CommandLine::Action::version;
		return cl;
	}

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
	if (int(o.dryRun) + int(o.once) + int(o.cleanup) > 1)
		return fail("--dry-run, --once and --cleanup exclude each other: pick one");
	if (!o.healthAddr.empty())
		if (auto address = parseListenAddress(o.healthAddr); !address)
			return fail(address.error());
	if (o.verbosity < 0)
		return fail(fmt::format("--v {}: verbosity cannot be negative", o.verbosity));
	if (!klogGiven.empty())
		cl.warnings.push_back(fmt::format("ignoring upstream's klog flags --{}: logs always go "
						  "to stderr", fmt::join(klogGiven, ", --")));

	cl.effectiveFlags = {
		fmt::format("--config={}", o.configPath),
		fmt::format("--masq-chain={}", o.ruleset.masqChain),
		fmt::format("--nomasq-all-reserved-ranges={}", boolText(o.configFlags.nomasqAllReservedRanges)),
		fmt::format("--enable-ipv6={}", boolText(o.configFlags.enableIpv6)),
		fmt::format("--random-fully={}", boolText(o.ruleset.randomFully)),
		fmt::format("--to-ports={}", toPorts),
		fmt::format("--table={}", o.ruleset.table),
		fmt::format("--priority={}", formatChainPriority(o.ruleset.priority)),
		fmt::format("--dry-run={}", boolText(o.dryRun)),
		fmt::format("--once={}", boolText(o.once)),
		fmt::format("--cleanup={}", boolText(o.cleanup)),
		fmt::format("--health-addr={}", o.healthAddr),
		fmt::format("--v={}", o.verbosity),
	};
	return cl;
}

} // namespace ipmasq
