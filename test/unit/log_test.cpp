// SPDX-License-Identifier: Apache-2.0
// Logging: one line per message whatever it holds, and journal detection by device:inode.
#include <catch2/catch.hpp>

#include <cstdio>
#include <fcntl.h>
#include <string>
#include <unistd.h>

#include "ip-masq-agent/log.h"

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
