// SPDX-License-Identifier: Apache-2.0
// Logging: one line per message whatever it holds, and journal detection by device:inode.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <fcntl.h>
#include <limits>
#include <string>
#include <unistd.h>

#include "ip-masq-agent/base/log.h"

using namespace ipmasq;

TEST_CASE("sanitizeLine: control bytes and line separators cannot start a new line")
{
	CHECK(log::sanitizeLine("plain text, \"quoted\\\" ok") == "plain text, \"quoted\\\" ok");
	CHECK(log::sanitizeLine("a\nerror: forged") == "a\\nerror: forged");
	CHECK(log::sanitizeLine("a\rb\tc") == "a\\rb\\tc");
	CHECK(log::sanitizeLine(std::string("a\0b", 3)) == "a\\x00b");
	CHECK(log::sanitizeLine("\x1b[31mred") == "\\x1b[31mred");
	CHECK(log::sanitizeLine("del\x7f") == "del\\x7f");
	// Valid UTF-8 passes (durations print "µs"), except C1 controls and U+2028/U+2029.
	CHECK(log::sanitizeLine("300\xc2\xb5s") == "300\xc2\xb5s");
	CHECK(log::sanitizeLine("x\xc2\x85y") == "x\\xc2\\x85y");       // U+0085 NEL
	CHECK(log::sanitizeLine("x\xe2\x80\xa8y") == "x\\xe2\\x80\\xa8y"); // U+2028
	CHECK(log::sanitizeLine("\xff\xfe") == "\\xff\\xfe");
	CHECK(log::sanitizeLine("\xc0\xaf") == "\\xc0\\xaf");         // overlong '/'
	CHECK(log::sanitizeLine("\xe2\x82") == "\\xe2\\x82");         // truncated
	CHECK(log::sanitizeLine("\xed\xa0\x80") == "\\xed\\xa0\\x80"); // surrogate
	CHECK(log::sanitizeLine("\xf0\x9f\x98\x80") == "\xf0\x9f\x98\x80");
}

TEST_CASE("log::write puts every message on exactly one line")
{
	char path[] = "/tmp/ipmasq-log-XXXXXX";
	const int fd = mkstemp(path);
	REQUIRE(fd >= 0);
	std::fflush(stderr);
	const int saved = dup(STDERR_FILENO);
	REQUIRE(dup2(fd, STDERR_FILENO) >= 0);
	log::write(log::Level::info, "first\nerror: forged line\r\n");
	log::error("second {}", "with\nnewline");
	std::fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);

	std::string text(4096, '\0');
	const ssize_t n = pread(fd, text.data(), text.size(), 0);
	close(fd);
	unlink(path);
	REQUIRE(n > 0);
	text.resize(static_cast<size_t>(n));
	size_t lines = 0;
	for (const char c : text)
		lines += c == '\n';
	CHECK(lines == 2);
	CHECK_THAT(text, Catch::Contains("first\\nerror: forged line\\r\\n\n"));
	CHECK_THAT(text, Catch::Contains("second with\\nnewline\n"));
}

TEST_CASE("the journal is stderr only when JOURNAL_STREAM names stderr's device:inode")
{
	struct stat st {};
	st.st_dev = 64769;
	st.st_ino = 123456;
	CHECK(log::isJournalStream("64769:123456", st));
	CHECK_FALSE(log::isJournalStream(nullptr, st));
	CHECK_FALSE(log::isJournalStream("", st));
	CHECK_FALSE(log::isJournalStream("1", st));
	CHECK_FALSE(log::isJournalStream("64769:123457", st)); // inherited, stderr elsewhere
	CHECK_FALSE(log::isJournalStream("64770:123456", st));
	CHECK_FALSE(log::isJournalStream("64769:", st));
	CHECK_FALSE(log::isJournalStream(":123456", st));
	CHECK_FALSE(log::isJournalStream("64769:123456x", st));
	CHECK_FALSE(log::isJournalStream("-1:123456", st));
	CHECK_FALSE(log::isJournalStream("99999999999999999999999:123456", st));
}

TEST_CASE("jsonString: every single byte gives a valid JSON string with no raw control byte")
{
	for (int value = 0; value < 256; value++) {
		const char byte = static_cast<char>(value);
		const std::string json = log::jsonString(std::string(1, byte));
		INFO("byte " << value << " -> " << json);
		REQUIRE(json.size() >= 3);
		CHECK(json.front() == '"');
		CHECK(json.back() == '"');
		const std::string inner = json.substr(1, json.size() - 2);
		if (value == '"')
			CHECK(inner == "\\\"");
		else if (value == '\\')
			CHECK(inner == "\\\\");
		else if (value == '\n')
			CHECK(inner == "\\n");
		else if (value == '\r')
			CHECK(inner == "\\r");
		else if (value == '\t')
			CHECK(inner == "\\t");
		else if (value < 0x20 || value == 0x7f)
			CHECK(inner == fmt::format("\\u{:04x}", value));
		else if (value >= 0x80) // a lone byte >= 0x80 is never valid UTF-8
			CHECK(inner == "\\ufffd");
		else
			CHECK(inner == std::string(1, byte));
	}
}

TEST_CASE("jsonString: valid UTF-8 passes, invalid UTF-8 and line separators are escaped")
{
	CHECK(log::jsonString("300\xc2\xb5s") == "\"300\xc2\xb5s\"");
	CHECK(log::jsonString("\xf0\x9f\x98\x80") == "\"\xf0\x9f\x98\x80\"");
	CHECK(log::jsonString("x\xc2\x85y") == "\"x\\u0085y\"");       // NEL
	CHECK(log::jsonString("x\xe2\x80\xa8y") == "\"x\\u2028y\"");    // U+2028
	CHECK(log::jsonString("x\xe2\x80\xa9y") == "\"x\\u2029y\"");    // U+2029
	CHECK(log::jsonString("\xc0\xaf") == "\"\\ufffd\\ufffd\"");     // overlong '/'
	CHECK(log::jsonString("\xe2\x82") == "\"\\ufffd\\ufffd\"");     // truncated
	CHECK(log::jsonString("\xed\xa0\x80") == "\"\\ufffd\\ufffd\\ufffd\""); // surrogate
	CHECK(log::jsonString("\xf4\x90\x80\x80") == "\"\\ufffd\\ufffd\\ufffd\\ufffd\""); // > U+10FFFF
	CHECK(log::jsonString("a\xe2\x82" "b") == "\"a\\ufffd\\ufffdb\"");
	CHECK(log::jsonString("10.0.0.0/8\n\"x\\") == "\"10.0.0.0/8\\n\\\"x\\\\\"");
	CHECK(log::jsonString(std::string("a\0b", 3)) == "\"a\\u0000b\"");
}

TEST_CASE("jsonLine: ts, level, v, msg, then the fields; strings quoted, numbers bare")
{
	CHECK(log::jsonLine("2026-11-23T19:53:03.123456Z", log::Level::info, "applied \"x\"",
			    {{"table", "ip-masq-agent"}, {"generation", uint64_t{42}}, {"ms", 1.25}}) ==
	      "{\"ts\":\"2026-11-23T19:53:03.123456Z\",\"level\":\"info\",\"v\":0,"
	      "\"msg\":\"applied \\\"x\\\"\",\"table\":\"ip-masq-agent\",\"generation\":42,"
	      "\"ms\":1.250}");
	CHECK(log::jsonLine("t", log::Level::debug, "d", {}) ==
	      "{\"ts\":\"t\",\"level\":\"debug\",\"v\":1,\"msg\":\"d\"}");
	// A field never repeats the message's own keys; JSON has no NaN.
	CHECK(log::jsonLine("t", log::Level::error, "e", {{"msg", "forged"}, {"ms", std::numeric_limits<double>::quiet_NaN()}}) ==
	      "{\"ts\":\"t\",\"level\":\"error\",\"v\":0,\"msg\":\"e\",\"ms\":\"nan\"}");
}

TEST_CASE("log::write in the json format writes one object per line; text ignores fields")
{
	char path[] = "/tmp/ipmasq-log-XXXXXX";
	const int fd = mkstemp(path);
	REQUIRE(fd >= 0);
	std::fflush(stderr);
	const int saved = dup(STDERR_FILENO);
	REQUIRE(dup2(fd, STDERR_FILENO) >= 0);
	log::info({{"file", "/etc/a\nb"}}, "text {}", "line");
	log::setFormat(log::Format::json);
	log::error({{"err", "bad\n\"x\""}}, "first {}", "with\nnewline");
	log::setFormat(log::Format::text);
	std::fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);

	std::string text(4096, '\0');
	const ssize_t n = pread(fd, text.data(), text.size(), 0);
	close(fd);
	unlink(path);
	REQUIRE(n > 0);
	text.resize(static_cast<size_t>(n));
	const size_t firstEnd = text.find('\n');
	REQUIRE(firstEnd != std::string::npos);
	CHECK_THAT(text.substr(0, firstEnd), Catch::EndsWith(" info: text line"));
	const std::string second = text.substr(firstEnd + 1);
	CHECK_THAT(second, Catch::StartsWith("{\"ts\":\"") &&
				   Catch::EndsWith("\",\"level\":\"error\",\"v\":0,\"msg\":\"first "
						   "with\\nnewline\",\"err\":\"bad\\n\\\"x\\\"\"}\n"));
	CHECK(std::count(second.begin(), second.end(), '\n') == 1);
}

TEST_CASE("formatLine: text as before; json one object per line, after <N> in the journal")
{
	const std::string ts = "2026-11-23T19:53:03.123456Z";
	CHECK(log::formatLine(log::Format::text, false, ts, log::Level::warning, "a\nb", {{"k", "v"}}) ==
	      ts + " warning: a\\nb\n");
	CHECK(log::formatLine(log::Format::text, true, ts, log::Level::warning, "a\nb", {{"k", "v"}}) ==
	      "<4>a\\nb\n");
	const std::string object =
		"{\"ts\":\"" + ts + "\",\"level\":\"warning\",\"v\":0,\"msg\":\"a\\nb\",\"k\":\"v\"}";
	CHECK(log::formatLine(log::Format::json, false, ts, log::Level::warning, "a\nb", {{"k", "v"}}) ==
	      object + "\n");
	CHECK(log::formatLine(log::Format::json, true, ts, log::Level::warning, "a\nb", {{"k", "v"}}) ==
	      "<4>" + object + "\n");
	CHECK(log::formatLine(log::Format::json, true, ts, log::Level::error, "e", {})
		      .rfind("<3>{", 0) == 0);
}

TEST_CASE("LogOnce: a failure is news once per distinct message, and so is its end")
{
	LogOnce failure;
	CHECK(failure.last().empty());
	CHECK_FALSE(failure.clear()); // nothing failed: no end to say
	CHECK(failure.changed("read failed: EINTR"));
	CHECK(failure.last() == "read failed: EINTR");
	CHECK_FALSE(failure.changed("read failed: EINTR")); // the retry fails the same way
	CHECK(failure.changed("read failed: ENOMEM"));     // another failure is news
	CHECK(failure.changed("read failed: EINTR"));      // and the first again, after it
	CHECK(failure.clear());
	CHECK(failure.last().empty());
	CHECK_FALSE(failure.clear());
	// After its end, the same failure is news again.
	CHECK(failure.changed("read failed: EINTR"));
}
