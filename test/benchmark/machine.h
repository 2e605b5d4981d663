// SPDX-License-Identifier: Apache-2.0
// The machine a benchmark ran on, for its header: CPU model and load average.
#pragma once

#include <fstream>
#include <sstream>
#include <string>

namespace ipmasq::bench {

// "Intel(R) Xeon(R) Processor", from /proc/cpuinfo's first "model name".
inline std::string cpuModel()
{
	std::ifstream in("/proc/cpuinfo");
	for (std::string line; std::getline(in, line);)
		if (line.rfind("model name", 0) == 0) {
			const size_t colon = line.find(':');
			return colon == std::string::npos ? line : line.substr(colon + 2);
		}
	return "unknown";
}

// "1.60 1.20 0.90": /proc/loadavg's 1, 5 and 15 minute averages.
inline std::string loadAverage()
{
	std::ifstream in("/proc/loadavg");
	std::string one, five, fifteen;
	in >> one >> five >> fifteen;
	return one + " " + five + " " + fifteen;
}

} // namespace ipmasq::bench
