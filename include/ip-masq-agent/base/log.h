// SPDX-License-Identifier: Apache-2.0
// Logging to stderr: levels, -v verbosity, text or JSON lines, and journald priority
// prefixes under systemd; LogOnce, for a failure said once per distinct message.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <sys/stat.h>

#include <fmt/format.h>

namespace ipmasq::log {

enum class Level { error = 3, warning = 4, info = 6, debug = 7 };

// Debug messages appear from this verbosity on (-v / --v).
void setVerbosity(int verbosity);
bool debugEnabled();

// --logging-format, as Kubernetes components spell it. text is the default.
enum class Format { text, json };
void setFormat(Format format);

// A structured value of a message, for the JSON format only: the text line already
// carries it in its words, and stays as it is. Keys are fixed names from the code.
struct Field {
	Field(std::string_view key, std::string_view text) : key(key), value(text) {}
	Field(std::string_view key, const char *text) : key(key), value(text) {}
	Field(std::string_view key, const std::string &text) : key(key), value(text) {}
	Field(std::string_view key, int64_t number) : key(key), value(std::to_string(number)), isNumber(true) {}
	Field(std::string_view key, uint64_t number) : key(key), value(std::to_string(number)), isNumber(true) {}
	Field(std::string_view key, int number) : Field(key, static_cast<int64_t>(number)) {}
	Field(std::string_view key, double number);

	std::string key;
	std::string value;     // the text, or the number as JSON writes it
	bool isNumber = false; // written bare, not as a string
};
using Fields = std::vector<Field>;

// Writes one line per message, whatever the message holds: see sanitizeLine and
// jsonLine.
void write(Level level, std::string_view message, const Fields &fields = {});

// The line write() emits, newline included. `journal`: stderr is the journal stream
// (isJournalStream), where a "<N>" priority prefix leads the line in both formats, and
// the text format leaves the timestamp to journald.
std::string formatLine(Format format, bool journal, std::string_view timestamp, Level level,
		       std::string_view message, const Fields &fields);

// formatLine() with the format and journal stream write() uses, for a line prepared ahead
// of the moment it is written (a fatal signal's handler may not format): the caller puts
// the time over `timestamp`, a stand-in of the same width.
std::string formatLineNow(std::string_view timestamp, Level level, std::string_view message);

// `text` as a JSON string, quotes included: quotes, backslashes and every control
// byte (C0, DEL) escaped, C1 controls and U+2028/U+2029 as \uXXXX, and each byte of
// invalid UTF-8 as U+FFFD, so that any input gives valid JSON on one line.
std::string jsonString(std::string_view text);

// One JSON object for a message, without the newline: {"ts":"<RFC 3339 UTC with
// microseconds>","level":"info","v":0,"msg":"...", then the fields}. An error
// message's "err" field follows Kubernetes' JSON format; "v" is 1 for debug messages.
std::string jsonLine(std::string_view timestamp, Level level, std::string_view message,
		     const Fields &fields);

// The message as one line of printable text: newlines, other control bytes, C1
// controls, the Unicode line separators and invalid UTF-8 become \n, \r, \t or \xNN.
// Values from outside are already escaped with quoted()/escaped() when a message is
// built; this is the sink's guarantee, so that no message can end its own line.
std::string sanitizeLine(std::string_view message);

// Whether stderr is the journal: systemd sets JOURNAL_STREAM to "device:inode" of the
// stream it connected, and only a matching stderr is that stream (systemd.exec(5));
// a child that inherited the variable but writes elsewhere is not. `journalStream` is
// the variable's value (nullptr when unset), `stderrStat` fstat() of stderr.
bool isJournalStream(const char *journalStream, const struct stat &stderrStat);

template<typename... Args>
void error(fmt::format_string<Args...> format, Args &&...args)
{
	write(Level::error, fmt::format(format, std::forward<Args>(args)...));
}

template<typename... Args>
void error(const Fields &fields, fmt::format_string<Args...> format, Args &&...args)
{
	write(Level::error, fmt::format(format, std::forward<Args>(args)...), fields);
}

template<typename... Args>
void warning(fmt::format_string<Args...> format, Args &&...args)
{
	write(Level::warning, fmt::format(format, std::forward<Args>(args)...));
}

template<typename... Args>
void warning(const Fields &fields, fmt::format_string<Args...> format, Args &&...args)
{
	write(Level::warning, fmt::format(format, std::forward<Args>(args)...), fields);
}

template<typename... Args>
void info(fmt::format_string<Args...> format, Args &&...args)
{
	write(Level::info, fmt::format(format, std::forward<Args>(args)...));
}

template<typename... Args>
void info(const Fields &fields, fmt::format_string<Args...> format, Args &&...args)
{
	write(Level::info, fmt::format(format, std::forward<Args>(args)...), fields);
}

template<typename... Args>
void debug(fmt::format_string<Args...> format, Args &&...args)
{
	if (debugEnabled())
		write(Level::debug, fmt::format(format, std::forward<Args>(args)...));
}

template<typename... Args>
void debug(const Fields &fields, fmt::format_string<Args...> format, Args &&...args)
{
	if (debugEnabled())
		write(Level::debug, fmt::format(format, std::forward<Args>(args)...), fields);
}

} // namespace ipmasq::log

namespace ipmasq {

// A failure said once per distinct message: the same failure again (at each retry, each
// resync, each pass) is no news, another one is, and so is its end. The caller logs what
// changed() and clear() say is news, in its own words around the message. Not shared
// between threads: one owner notes and logs.
class LogOnce
{
public:
	// `message` is the failure now: true when it differs from the one noted before (the
	// caller says it). Noted from now on.
	bool changed(std::string_view message)
	{
		if (message == last_)
			return false;
		last_ = message;
		return true;
	}
	// The failure ended: true when there was one (the caller may say that it ended).
	bool clear() { return !std::exchange(last_, std::string()).empty(); }
	// The failure noted last; empty when none.
	const std::string &last() const { return last_; }

private:
	std::string last_;
};

} // namespace ipmasq
