// SPDX-License-Identifier: Apache-2.0
// Fuzz target: the whole command line. The input is split at NUL bytes into argv.
// Invariants: no crash or hang (Boost's message templates are never expanded); errors
// and the effective flags are one line each; accepted options pass validation and
// build a ruleset that renders.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/nft/nft_text.h"
#include "ip-masq-agent/cli/options.h"
#include "ip-masq-agent/compile/ruleset_mapping.h"

using namespace ipmasq;

namespace {
constexpr size_t kMaxArguments = 64;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	std::vector<std::string> words{"ip-masq-agent"};
	std::string current;
	for (size_t i = 0; i < size && words.size() < kMaxArguments; i++) {
		if (data[i] == '\0') {
			words.push_back(std::move(current));
			current.clear();
		} else {
			current += static_cast<char>(data[i]);
		}
	}
	if (!current.empty() && words.size() < kMaxArguments)
		words.push_back(std::move(current));
	std::vector<const char *> argv;
	for (const std::string &word : words)
		argv.push_back(word.c_str());
	argv.push_back(nullptr);

	auto cl = parseCommandLine(static_cast<int>(words.size()), argv.data());
	if (!cl) {
		fuzz::checkOneLine(cl.error().message);
		return 0;
	}
	for (const std::string &flag : cl->effectiveFlags)
		fuzz::checkOneLine(flag);
	for (const std::string &warning : cl->warnings)
		fuzz::checkOneLine(warning);
	if (cl->action != CommandLine::Action::run)
		return 0;
	const AgentOptions &o = cl->options;
	// No control byte is part of a valid host:port: an accepted one would be a byte the
	// address parser skipped.
	for (const char c : o.healthAddr)
		fuzz::check(static_cast<unsigned char>(c) >= 0x20 && c != 0x7f,
			    "a --health-addr with a control byte was accepted", o.healthAddr);
	fuzz::check(bool(validateRulesetOptions(o.ruleset)), "accepted options do not validate");
	const Ruleset ruleset = buildRuleset(defaultConfig(o.configFlags), o.ruleset);
	for (const Chain &chain : ruleset.chains)
		for (const Rule &rule : chain.rules)
			fuzz::check(rule.comment.size() <= kMaxNftCommentLength,
				    "an accepted flag makes a comment nft refuses", rule.comment);
	const auto script = renderNftScript(ruleset);
	fuzz::check(script && !script->empty(), "nothing rendered", script ? "" : script.error().message);
	return 0;
}
