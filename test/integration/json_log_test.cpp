// SPDX-License-Identifier: Apache-2.0
// --logging-format=json end to end: every line the agent writes is one valid JSON object.
#include <catch2/catch.hpp>

#include <csignal>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "agent_process.h"
#include "netns.h"

using namespace std::chrono_literals;
using namespace ipmasq::test;

namespace {

// A strict reader for the objects the agent writes: one flat object whose values are
// strings, numbers, true, false or null (RFC 8259 grammar, UTF-8 checked), and nothing
// after it. Returns the members (strings decoded, other values as written), or nothing.
class FlatJsonReader
{
public:
	explicit FlatJsonReader(std::string_view text) : text_(text) {}

	std::optional<std::map<std::string, std::string>> read()
	{
		std::map<std::string, std::string> members;
		if (!consume('{'))
			return std::nullopt;
		if (consume('}'))
			return atEnd() ? std::optional(members) : std::nullopt;
		for (;;) {
			auto key = string();
			if (!key || !consume(':'))
				return std::nullopt;
			auto value = peek() == '"' ? string() : scalar();
			if (!value || members.count(*key))
				return std::nullopt; // duplicate keys are ambiguous to readers
			members[*key] = *value;
			if (consume('}'))
				return atEnd() ? std::optional(members) : std::nullopt;
			if (!consume(','))
				return std::nullopt;
		}
	}

private:
	char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
	bool atEnd() const { return pos_ == text_.size(); }
	bool consume(char c)
	{
		if (peek() != c || atEnd())
			return false;
		pos_++;
		return true;
	}

	static void appendUtf8(std::string &out, uint32_t code)
	{
		if (code < 0x80) {
			out += static_cast<char>(code);
		} else if (code < 0x800) {
			out += static_cast<char>(0xc0 | (code >> 6));
			out += static_cast<char>(0x80 | (code & 0x3f));
		} else {
			out += static_cast<char>(0xe0 | (code >> 12));
			out += static_cast<char>(0x80 | ((code >> 6) & 0x3f));
			out += static_cast<char>(0x80 | (code & 0x3f));
		}
	}

	// Length of a valid UTF-8 sequence at pos_ (a byte >= 0x80), or 0.
	size_t utf8Length() const
	{
		const auto byte = [&](size_t i) { return static_cast<unsigned char>(text_[pos_ + i]); };
		const unsigned char lead = byte(0);
		size_t length = lead >= 0xc2 && lead <= 0xdf ? 2 : lead >= 0xe0 && lead <= 0xef ? 3
								 : lead >= 0xf0 && lead <= 0xf4 ? 4 : 0;
		if (length == 0 || pos_ + length > text_.size())
			return 0;
		for (size_t i = 1; i < length; i++)
			if ((byte(i) & 0xc0) != 0x80)
				return 0;
		if ((lead == 0xe0 && byte(1) < 0xa0) || (lead == 0xed && byte(1) >= 0xa0) ||
		    (lead == 0xf0 && byte(1) < 0x90) || (lead == 0xf4 && byte(1) >= 0x90))
			return 0; // overlong, surrogate, beyond U+10FFFF
		return length;
	}

	std::optional<std::string> string()
	{
		if (!consume('"'))
			return std::nullopt;
		std::string out;
		while (!atEnd()) {
			const auto byte = static_cast<unsigned char>(text_[pos_]);
			if (byte == '"') {
				pos_++;
				return out;
			}
			if (byte < 0x20)
				return std::nullopt; // raw control bytes are not JSON
			if (byte >= 0x80) {
				const size_t length = utf8Length();
				if (length == 0)
					return std::nullopt;
				out.append(text_.substr(pos_, length));
				pos_ += length;
				continue;
			}
			pos_++;
			if (byte != '\\') {
				out += static_cast<char>(byte);
				continue;
			}
			const char escape = peek();
			pos_++;
			switch (escape) {
			case '"': out += '"'; break;
			case '\\': out += '\\'; break;
			case '/': out += '/'; break;
			case 'b': out += '\b'; break;
			case 'f': out += '\f'; break;
			case 'n': out += '\n'; break;
			case 'r': out += '\r'; break;
			case 't': out += '\t'; break;
			case 'u': {
				if (pos_ + 4 > text_.size())
					return std::nullopt;
				uint32_t code = 0;
				for (size_t i = 0; i < 4; i++) {
					const char h = text_[pos_ + i];
					const int digit = h >= '0' && h <= '9' ? h - '0'
							  : h >= 'a' && h <= 'f' ? h - 'a' + 10
							  : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
					if (digit < 0)
						return std::nullopt;
					code = code * 16 + static_cast<uint32_t>(digit);
				}
				pos_ += 4;
				if (code >= 0xd800 && code <= 0xdfff)
					return std::nullopt; // the agent never writes surrogate pairs
				appendUtf8(out, code);
				break;
			}
			default: return std::nullopt;
			}
		}
		return std::nullopt;
	}

	// A number (RFC 8259 grammar), true, false or null, as written.
	std::optional<std::string> scalar()
	{
		for (const std::string_view word : {"true", "false", "null"})
			if (text_.substr(pos_, word.size()) == word) {
				pos_ += word.size();
				return std::string(word);
			}
		const size_t start = pos_;
		const auto digits = [&] {
			const size_t from = pos_;
			while (peek() >= '0' && peek() <= '9' && !atEnd())
				pos_++;
			return pos_ > from;
		};
		consume('-');
		if (consume('0')) {
			if (peek() >= '0' && peek() <= '9')
				return std::nullopt;
		} else if (!digits()) {
			return std::nullopt;
		}
		if (consume('.') && !digits())
			return std::nullopt;
		if (peek() == 'e' || peek() == 'E') {
			pos_++;
			if (!consume('+'))
				consume('-');
			if (!digits())
				return std::nullopt;
		}
		return std::string(text_.substr(start, pos_ - start));
	}

	std::string_view text_;
	size_t pos_ = 0;
};

using Entry = std::map<std::string, std::string>;

// Every line of the log as an object; a line that is not one fails the test.
std::vector<Entry> parseEveryLine(const std::string &log)
{
	std::vector<Entry> entries;
	std::istringstream lines(log);
	std::string line;
	while (std::getline(lines, line)) {
		INFO("line: " << line);
		auto entry = FlatJsonReader(line).read();
		REQUIRE(entry);
		REQUIRE(entry->count("ts"));
		REQUIRE(entry->count("level"));
		REQUIRE(entry->count("v"));
		REQUIRE(entry->count("msg"));
		entries.push_back(std::move(*entry));
	}
	return entries;
}

size_t countEntries(const std::string &log, const std::function<bool(const Entry &)> &match)
{
	size_t n = 0;
	std::istringstream lines(log);
	std::string line;
	while (std::getline(lines, line))
		if (auto entry = FlatJsonReader(line).read(); entry && match(*entry))
			n++;
	return n;
}

bool startsWith(const std::string &text, std::string_view prefix)
{
	return text.rfind(prefix, 0) == 0;
}

bool applied(const Entry &e)
{
	return e.at("level") == "info" && startsWith(e.at("msg"), "applied table inet");
}

} // namespace

TEST_CASE("the strict reader refuses what is not one flat JSON object")
{
	CHECK(FlatJsonReader(R"({"a":"x\n\u00e9","b":-1.5e3,"c":true})").read());
	for (const char *bad : {"", "{", "{}x", R"({"a":1,})", R"({"a":01})", "{\"a\":\"\n\"}",
				R"({"a":"\x"})", "{\"a\":\"\xff\"}", R"({"a":1,"a":2})", R"({"a":"\ud800"})",
				R"({a:1})", R"({"a":1} {"b":2})", "{\"a\":\"\xed\xa0\x80\"}"}) {
		INFO(bad);
		CHECK_FALSE(FlatJsonReader(bad).read());
	}
}

TEST_CASE("--logging-format=json: start, config change, bad config and heal, all valid JSON")
{
	run("nft delete table inet ip-masq-agent 2>/dev/null");
	TempDir dir;
	dir.write("config", "resyncInterval: 1h\nnonMasqueradeCIDRs: [10.0.0.0/8]\n");
	AgentProcess agent({"--config=" + dir.file("config"), "--logging-format=json", "--v=1",
			    "--health-addr="});
	const auto logged = [&](const std::function<bool(const Entry &)> &match) {
		return [&agent, match] { return countEntries(agent.log(), match) > 0; };
	};
	const auto within = [&](const std::function<bool()> &condition, const char *what) {
		INFO(what << "\nagent log:\n" << agent.log());
		REQUIRE(waitFor(condition, 10s));
	};
	within(logged(applied), "first apply");

	dir.write("config", "resyncInterval: 1h\nnonMasqueradeCIDRs: [192.0.2.0/24]\n");
	within([&] { return countEntries(agent.log(), applied) >= 2 && tableHas("192.0.2.0/24"); },
	       "config change applied");

	// A CIDR with a newline and a quote in it: YAML decodes both escapes.
	dir.write("config", "nonMasqueradeCIDRs: [\"10.1.0.0/16\\n\\\"x\"]\n");
	const auto configError = [](const Entry &e) {
		return e.at("level") == "error" && e.count("err") && e.count("file");
	};
	within(logged(configError), "config error");

	dir.write("config", "resyncInterval: 1h\nnonMasqueradeCIDRs: [198.51.100.0/24]\n");
	within([&] { return countEntries(agent.log(), applied) >= 3; }, "config valid again");
	REQUIRE(run("nft delete table inet ip-masq-agent") == 0);
	const auto restored = [](const Entry &e) {
		return e.at("level") == "debug" && startsWith(e.at("msg"), "restored table inet");
	};
	within(logged(restored), "heal");
	CHECK(agent.stop(SIGTERM) == 0);

	const std::string log = agent.log();
	INFO("agent log:\n" << log);
	const std::vector<Entry> entries = parseEveryLine(log);
	REQUIRE(entries.size() >= 6);
	for (const Entry &e : entries) {
		CHECK(e.at("ts").size() == std::string("2026-11-23T19:53:03.123456Z").size());
		CHECK(e.at("ts").back() == 'Z');
		CHECK((e.at("level") == "debug" ? e.at("v") == "1" : e.at("v") == "0"));
	}

	const Entry &start = entries.front();
	CHECK_THAT(start.at("msg"), Catch::Contains("starting"));
	CHECK(start.count("version"));
	CHECK_THAT(start.at("flags"), Catch::Contains("--logging-format=json"));

	for (const Entry &e : entries)
		if (applied(e)) {
			CHECK(e.at("table") == "ip-masq-agent");
			CHECK(e.count("trigger"));
			CHECK_THAT(e.at("sets"), Catch::Contains("IPv4"));
			CHECK(std::stod(e.at("ms")) >= 0);
			CHECK(std::stoull(e.at("generation")) > 0);
		}

	size_t errors = 0;
	for (const Entry &e : entries)
		if (configError(e)) {
			errors++;
			CHECK(e.at("file") == dir.file("config"));
			// The CIDR reaches the log escaped by quoted(): still one line, both
			// characters visible.
			CHECK_THAT(e.at("err"), Catch::Contains("10.1.0.0/16\\n\\\"x"));
			CHECK_THAT(e.at("msg"), Catch::StartsWith(e.at("err")));
		}
	CHECK(errors == 1);

	size_t drifts = 0;
	for (const Entry &e : entries)
		if (e.at("level") == "warning" && e.count("table") &&
		    e.at("msg").find("changed or deleted outside the agent") != std::string::npos)
			drifts++;
	CHECK(drifts == 1);
	run("nft delete table inet ip-masq-agent 2>/dev/null");
}
