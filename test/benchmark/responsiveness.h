// SPDX-License-Identifier: Apache-2.0
// Section 10 of the benchmark: how fast the agent reacts where the tests only check that
// it does (tests check behaviour, the benchmark speed): an address notification, the SNAT rule following the node's
// address, probes and healing under connection floods, a writer fighting the table.
#pragma once

#include <string>
#include <vector>

namespace ipmasq::bench {

// One figure against its target; `ok` says whether it met it.
struct ResponsivenessFigure {
	std::string what;
	std::string figure; // "12.3 ms", "0.04 s"
	std::string detail; // how many samples, the median, ...
	std::string target; // "< 100 ms"
	bool ok = false;
};

// Runs in the benchmark's private network namespace; `dir` is its scratch directory.
std::vector<ResponsivenessFigure> measureResponsiveness(const std::string &dir);

} // namespace ipmasq::bench
