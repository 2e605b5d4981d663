// SPDX-License-Identifier: Apache-2.0
// ip-masq-agent's entry point: parse the flags, set up logging and the process's safety net,
// then run the mode the flags ask for (modes.h).
#include <cstdio>
#include <cstdlib>

#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/cli/modes.h"
#include "ip-masq-agent/cli/options.h"
#include "ip-masq-agent/base/process_guard.h"
#include "ip_masq_agent_version.h"

using namespace ipmasq;

int main(int argc, char **argv)
{
	process::guardStandardDescriptors();
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
	log::setFormat(cl->options.loggingFormat);
	process::installFatalHandlers();
	for (const std::string &warning : cl->warnings)
		log::warning("{}", warning);

	const AgentOptions &options = cl->options;
	if (options.dryRun)
		return runDryRun(options);
	if (!options.explain.empty())
		return runExplain(options);
	if (options.snatUsage)
		return runSnatUsage(options);
	return runAgent(std::move(cl->options), cl->effectiveFlags);
}
