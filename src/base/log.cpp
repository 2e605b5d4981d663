// SPDX-License-Identifier: Apache-2.0
// Logging to stderr: one line per message, text (timestamped unless journald adds its
// own) or one JSON object.
#include "ip-masq-agent/base/log.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>

#include <unistd.h>

#include "ip-masq-agent/base/ascii.h"

namespace ipmasq::log {

namespace {

int gVerbosity = 0;
Format gFormat = Format::text;

// Under systemd, stderr goes to the journal, which timestamps lines and reads a
// "<N>" prefix as the syslog priority (sd-daemon(3)).
bool toJournal()
{
	static const bool journal = [] {
		struct stat st {};
		return fstat(STDERR_FILENO, &st) == 0 &&
		       isJournalStream(std::getenv("JOURNAL_STREAM"), st);
	}();
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

// The current time as RFC 3339 in UTC with microseconds, e.g. 2026-11-23T19:53:03.123456Z.
std::string timestampNow()
{
	const auto now = std::chrono::system_clock::now();
	const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
	const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
				    now.time_since_epoch()).count() % 1000000;
	std::tm utc{};
	gmtime_r(&seconds, &utc);
	char stamp[32];
	std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &utc);
	return fmt::format("{}.{:06}Z", stamp, micros);
}

// Valid UTF-8 at the start of `s`: its length and code point, or length 0.
struct Utf8Sequence {
	size_t length = 0;
	uint32_t code = 0;
};

Utf8Sequence decodeUtf8(std::string_view s)
{
	const auto byte = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
	const unsigned char lead = byte(0);
	size_t length = 0;
	uint32_t min = 0, code = 0;
	if (lead >= 0xc2 && lead <= 0xdf) {
		length = 2, min = 0x80, code = lead & 0x1f;
	} else if (lead >= 0xe0 && lead <= 0xef) {
		length = 3, min = 0x800, code = lead & 0x0f;
	} else if (lead >= 0xf0 && lead <= 0xf4) {
		length = 4, min = 0x10000, code = lead & 0x07;
	} else {
		return {};
	}
	for (size_t i = 1; i < length; i++) {
		if (i >= s.size() || (byte(i) & 0xc0) != 0x80)
			return {};
		code = (code << 6) | (byte(i) & 0x3f);
	}
	if (code < min || code > 0x10ffff || (code >= 0xd800 && code <= 0xdfff))
		return {};
	return {length, code};
}

// Length of the valid UTF-8 sequence at the start of `s` that is safe to print
// (not a C1 control, not U+2028/U+2029), or 0.
size_t printableUtf8Length(std::string_view s)
{
	const Utf8Sequence sequence = decodeUtf8(s);
	const bool lineBreaking = (sequence.code >= 0x80 && sequence.code <= 0x9f) ||
				  sequence.code == 0x2028 || sequence.code == 0x2029;
	return lineBreaking ? 0 : sequence.length;
}

} // namespace

Field::Field(std::string_view key, double number) : key(key)
{
	// JSON has no NaN or infinity: those are written as strings.
	isNumber = std::isfinite(number);
	value = isNumber ? fmt::format("{:.3f}", number) : fmt::format("{}", number);
}

void setFormat(Format format)
{
	gFormat = format;
}

std::string jsonString(std::string_view text)
{
	std::string out = "\"";
	out.reserve(text.size() + 2);
	for (size_t i = 0; i < text.size();) {
		const auto byte = static_cast<unsigned char>(text[i]);
		if (byte >= 0x80) {
			const Utf8Sequence sequence = decodeUtf8(text.substr(i));
			if (sequence.length == 0) {
				out += "\\ufffd"; // each invalid byte, as decoders replace it
				i++;
			} else if ((sequence.code >= 0x80 && sequence.code <= 0x9f) ||
				   sequence.code == 0x2028 || sequence.code == 0x2029) {
				// Valid JSON, but line breaks to some readers (JavaScript, NEL).
				out += fmt::format("\\u{:04x}", sequence.code);
				i += sequence.length;
			} else {
				out.append(text.substr(i, sequence.length));
				i += sequence.length;
			}
			continue;
		}
		switch (byte) {
		case '"': out += "\\\""; break;
		case '\\': out += "\\\\"; break;
		case '\n': out += "\\n"; break;
		case '\r': out += "\\r"; break;
		case '\t': out += "\\t"; break;
		default:
			if (byte < 0x20 || byte == 0x7f)
				out += fmt::format("\\u{:04x}", byte);
			else
				out += static_cast<char>(byte);
		}
		i++;
	}
	out += '"';
	return out;
}

std::string jsonLine(std::string_view timestamp, Level level, std::string_view message,
		     const Fields &fields)
{
	std::string line = fmt::format("{{\"ts\":{},\"level\":\"{}\",\"v\":{},\"msg\":{}",
				       jsonString(timestamp), levelName(level),
				       level == Level::debug ? 1 : 0, jsonString(message));
	for (const Field &field : fields) {
		// The keys above are the message's own; a field never repeats one.
		if (field.key == "ts" || field.key == "level" || field.key == "v" || field.key == "msg")
			continue;
		line += fmt::format(",{}:{}", jsonString(field.key),
				    field.isNumber ? field.value : jsonString(field.value));
	}
	line += '}';
	return line;
}

bool isJournalStream(const char *journalStream, const struct stat &stderrStat)
{
	if (!journalStream)
		return false;
	const std::string_view text = journalStream;
	const size_t colon = text.find(':');
	if (colon == std::string_view::npos)
		return false;
	const auto device = ascii::parseDecimal(text.substr(0, colon));
	const auto inode = ascii::parseDecimal(text.substr(colon + 1));
	return device && inode && *device == static_cast<uint64_t>(stderrStat.st_dev) &&
	       *inode == static_cast<uint64_t>(stderrStat.st_ino);
}

std::string sanitizeLine(std::string_view message)
{
	std::string out;
	out.reserve(message.size());
	for (size_t i = 0; i < message.size();) {
		const auto byte = static_cast<unsigned char>(message[i]);
		if (byte >= 0x20 && byte < 0x7f) {
			out += message[i++];
			continue;
		}
		if (byte >= 0x80) {
			if (const size_t length = printableUtf8Length(message.substr(i))) {
				out.append(message.substr(i, length));
				i += length;
				continue;
			}
		}
		switch (byte) {
		case '\n': out += "\\n"; break;
		case '\r': out += "\\r"; break;
		case '\t': out += "\\t"; break;
		default: out += fmt::format("\\x{:02x}", byte);
		}
		i++;
	}
	return out;
}

void setVerbosity(int verbosity)
{
	gVerbosity = verbosity;
}

bool debugEnabled()
{
	return gVerbosity > 0;
}

std::string formatLine(Format format, bool journal, std::string_view timestamp, Level level,
		       std::string_view message, const Fields &fields)
{
	if (format == Format::json) {
		// Under systemd the "<N>" prefix stays: journald takes it as the priority
		// and stores the rest, the JSON object, as the message.
		const std::string object = jsonLine(timestamp, level, message, fields);
		return journal ? fmt::format("<{}>{}\n", static_cast<int>(level), object)
			       : object + '\n';
	}
	if (journal)
		return fmt::format("<{}>{}\n", static_cast<int>(level), sanitizeLine(message));
	return fmt::format("{} {}: {}\n", timestamp, levelName(level), sanitizeLine(message));
}

std::string formatLineNow(std::string_view timestamp, Level level, std::string_view message)
{
	return formatLine(gFormat, toJournal(), timestamp, level, message, {});
}

void write(Level level, std::string_view message, const Fields &fields)
{
	const std::string line = formatLine(gFormat, toJournal(), timestampNow(), level, message,
					    fields);
	// One write per line, so concurrent writers (tests, the kubelet's log reader)
	// never see interleaved fragments.
	std::fwrite(line.data(), 1, line.size(), stderr);
	// A reader that went away (EPIPE: SIGPIPE is ignored), a full disk: the line is lost,
	// and the agent goes on with its work. The error is cleared, so that the next line
	// is tried again (a log collector restarted, space freed).
	if (std::fflush(stderr) != 0 || std::ferror(stderr))
		std::clearerr(stderr);
}

} // namespace ipmasq::log
