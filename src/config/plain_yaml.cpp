// SPDX-License-Identifier: Apache-2.0
// A fast scanner for plain block YAML: validates the whole text, then sends yaml-cpp's events.
#include "ip-masq-agent/config/plain_yaml.h"

#include <optional>
#include <string>

#include <yaml-cpp/emitterstyle.h>
#include <yaml-cpp/mark.h>

#include "ip-masq-agent/base/ascii.h"

namespace ipmasq {

namespace {

using ascii::isDigit;
using ascii::isLetter;

bool isKeyChar(char c) { return isLetter(c) || isDigit(c); }
bool isValueChar(char c) { return isKeyChar(c) || c == '.' || c == '/' || c == ':'; }

// yaml-cpp reports these plain scalars as null (OnNull), not as text.
bool isYamlNull(std::string_view s)
{
	return s == "~" || s == "null" || s == "Null" || s == "NULL";
}

bool isKey(std::string_view s)
{
	if (s.empty() || !isLetter(s[0]) || isYamlNull(s))
		return false;
	for (char c : s)
		if (!isKeyChar(c))
			return false;
	return true;
}

// A plain scalar that reads the same in every context: a ":" at its end would make it
// a key, so it may not end with one.
bool isValue(std::string_view s)
{
	if (s.empty() || s.back() == ':' || isYamlNull(s))
		return false;
	for (char c : s)
		if (!isValueChar(c))
			return false;
	return true;
}

// One line of the subset. Positions are byte offsets in the text.
struct Line {
	enum class Kind { ignored, key, item } kind = Kind::ignored;
	size_t start = 0; // of the key, or of the "-" of an item
	size_t column = 0;
	std::string_view key;
	std::string_view value; // empty: a key whose value is the block list that follows
	size_t valueStart = 0;
};

size_t skipSpaces(std::string_view line, size_t i)
{
	while (i < line.size() && line[i] == ' ')
		i++;
	return i;
}

// Classify one line (without its "\n"); nullopt: not in the subset.
std::optional<Line> classify(std::string_view line, size_t start)
{
	for (char c : line)
		if (c < 0x20 || c > 0x7e)
			return std::nullopt; // tabs, CR, control characters, non-ASCII
	const size_t indent = skipSpaces(line, 0);
	if (indent == line.size() || line[indent] == '#')
		return Line{};
	Line out;
	out.start = start + indent;
	out.column = indent;
	if (line[indent] == '-') {
		// "- value": the item's text starts after one or more spaces.
		if (indent + 1 >= line.size() || line[indent + 1] != ' ')
			return std::nullopt;
		const size_t at = skipSpaces(line, indent + 1);
		out.kind = Line::Kind::item;
		out.value = line.substr(at);
		out.valueStart = start + at;
		return isValue(out.value) ? std::optional(out) : std::nullopt;
	}
	if (indent != 0)
		return std::nullopt;
	const size_t colon = line.find(':');
	if (colon == std::string_view::npos || !isKey(line.substr(0, colon)))
		return std::nullopt;
	out.kind = Line::Kind::key;
	out.key = line.substr(0, colon);
	if (colon + 1 == line.size())
		return out; // "key:" and a block list below
	if (line[colon + 1] != ' ')
		return std::nullopt;
	const size_t at = skipSpaces(line, colon + 1);
	out.value = line.substr(at);
	out.valueStart = start + at;
	return isValue(out.value) ? std::optional(out) : std::nullopt;
}

// Walks the lines of the subset; with a handler it sends the events, without one it
// only checks. Both walks take the same decisions, so a text that passes the check is
// sent in full.
class Walker
{
public:
	Walker(std::string_view text, YAML::EventHandler *handler) : text_(text), handler_(handler) {}

	bool run()
	{
		size_t start = 0;
		size_t number = 0;
		while (start < text_.size()) {
			size_t end = text_.find('\n', start);
			if (end == std::string_view::npos)
				end = text_.size();
			const auto line = classify(text_.substr(start, end - start), start);
			if (!line || !take(*line, number))
				return false;
			start = end + 1;
			number++;
		}
		return finish();
	}

private:
	enum class State { top, listExpected, list };

	YAML::Mark mark(size_t pos, size_t line, size_t column) const
	{
		YAML::Mark m;
		m.pos = static_cast<int>(pos);
		m.line = static_cast<int>(line);
		m.column = static_cast<int>(column);
		return m;
	}

	void scalar(size_t pos, size_t line, size_t column, std::string_view value)
	{
		if (handler_)
			handler_->OnScalar(mark(pos, line, column), "?", YAML::NullAnchor,
					   std::string(value));
	}

	bool take(const Line &line, size_t number)
	{
		switch (line.kind) {
		case Line::Kind::ignored:
			return true;
		case Line::Kind::item:
			return takeItem(line, number);
		case Line::Kind::key:
			return takeKey(line, number);
		}
		return false;
	}

	bool takeItem(const Line &line, size_t number)
	{
		if (state_ == State::top || (state_ == State::list && line.column != listColumn_))
			return false;
		if (state_ == State::listExpected) {
			state_ = State::list;
			listColumn_ = line.column;
			if (handler_)
				handler_->OnSequenceStart(mark(line.start, number, line.column), "?",
							  YAML::NullAnchor, YAML::EmitterStyle::Block);
		}
		scalar(line.valueStart, number, line.valueStart - line.start + line.column, line.value);
		return true;
	}

	bool takeKey(const Line &line, size_t number)
	{
		if (state_ == State::listExpected)
			return false; // "key:" with nothing below is a null
		endList();
		if (!documentStarted_) {
			documentStarted_ = true;
			if (handler_) {
				handler_->OnDocumentStart(mark(line.start, number, 0));
				handler_->OnMapStart(mark(line.start, number, 0), "?", YAML::NullAnchor,
						     YAML::EmitterStyle::Block);
			}
		}
		scalar(line.start, number, 0, line.key);
		if (line.value.empty())
			state_ = State::listExpected;
		else
			scalar(line.valueStart, number, line.valueStart - line.start, line.value);
		return true;
	}

	void endList()
	{
		if (state_ == State::list && handler_)
			handler_->OnSequenceEnd();
		state_ = State::top;
	}

	bool finish()
	{
		if (!documentStarted_ || state_ == State::listExpected)
			return false;
		endList();
		if (handler_) {
			handler_->OnMapEnd();
			handler_->OnDocumentEnd();
		}
		return true;
	}

	std::string_view text_;
	YAML::EventHandler *handler_;
	State state_ = State::top;
	size_t listColumn_ = 0;
	bool documentStarted_ = false;
};

} // namespace

bool scanPlainYaml(std::string_view text, YAML::EventHandler &handler)
{
	// Check first: no event may be sent for a text yaml-cpp must read after all.
	return Walker(text, nullptr).run() && Walker(text, &handler).run();
}

} // namespace ipmasq
