// SPDX-License-Identifier: Apache-2.0
// ip-masq-agent's entry point: parse flags, then wire config -> ruleset -> renderer.
#include <cstdio>
#include <cstdlib>

#include "ip-masq-agent/config.h"
#include "ip-masq-agent/log.h"
#include "ip-masq-agent/nft_text.h"
#include "ip-masq-agent/options.h"
#include "ip-masq-agent/ruleset.h"
#include "ip_masq_agent_version.h"

using namespace ipmasq;

namespace {

int dryRun(const AgentOptions &options)
{
	auto loaded = loadConfigFile(options.configPath, options.configFlags);
	if (!loaded) {
		log::error("{}", loaded.error().message);
		return EXIT_FAILURE;
	}
	for (const std::string &warning : loaded->warnings)
		log::warning("{}", warning);

	const Ruleset ruleset = buildRuleset(loaded->config, options.ruleset);
	const std::string source = loaded->fromFile
		? options.configPath
		: fmt::format("built-in defaults ({} not found)", options.configPath);
	const std::string script = renderNftScript(
		ruleset, {fmt::format("ip-masq-agent {} dry run, config: {}", IP_MASQ_AGENT_VERSION,
				      source),
			  fmt::format("Replaces table inet {} atomically and touches nothing else.",
				      ruleset.table),
			  "Apply by hand with: ip-masq-agent --dry-run | nft -f -"});
	std::fwrite(script.data(), 1, script.size(), stdout);
	return std::fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

} // namespace

int main(int argc, char **argv)
{
	auto cl = parseCommandLine(argc, argv);
	if (!cl) {
		std::fprintf(stderr, "ip-masq-agent: %s\n", cl.error().message.c_str());
		return 2;
	}
	switch (cl->action) {
	case CommandLine::Action::help:
		std::fputs(cl->helpText.c_str(), stdout);
		return EXIT_SUCCESS;
	case CommandLine::Action::version:
		std::printf("ip-masq-agent %s\n", IP_MASQ_AGENT_VERSION);
		return EXIT_SUCCESS;
	case CommandLine::Action::run:
		break;
	}

	log::setVerbosity(cl->options.verbosity);
	for (const std::string &warning : cl->warnings)
		log::warning("{}", warning);

	if (cl->options.dryRun)
		return dryRun(cl->options);

	log::error("only --dry-run is available in this build: the netlink backend is not "
		   "part of it yet");
	return EXIT_FAILURE;
}
