// SPDX-License-Identifier: Apache-2.0
// Logging to stderr: one line per message, timestamped unless journald adds its own.
#include "ip-masq-agent/log.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <string>

namespace ipmasq::log {

namespace {

int gVerbosity = 0;

// Under systemd, stderr goes to the journal, which timestamps lines and reads a
// "<N>" prefix as the syslog priority (sd-daemon(3)).
bool toJournal()
{
	static const bool journal = std::getenv("JOURNAL_STREAM") != nullptr;
	return journal;
}

const char *levelName(Level level)
{
	switch (level) {
	case Level::error: return "error";
	case Level::warning: return "warning";
	case Level::info: return "info";
	case Level::debug: return "debug";
	}
	return "?";
}

} // namespace

void setVerbosity(int verbosity)
{
	gVerbosity = verbosity;
}

bool debugEnabled()
{
	return gVerbosity > 0;
}

void write(Level level, std::string_view message)
{
	std::string line;
	if (toJournal()) {
		line = fmt::format("<{}>{}\n", static_cast<int>(level), message);
	} else {
		const auto now = std::chrono::system_clock::now();
		const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
		const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
					    now.time_since_epoch()).count() % 1000000;
		std::tm utc{};
		gmtime_r(&seconds, &utc);
		char stamp[32];
		std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
		line = fmt::format("{}.{:06}Z {}: {}\n", stamp, micros, levelName(level), message);
	}
	// One write per line, so concurrent writers (tests, the kubelet's log reader)
	// never see interleaved fragments.
	std::fwrite(line.data(), 1, line.size(), stderr);
	std::fflush(stderr);
}

} // namespace ipmasq::log
