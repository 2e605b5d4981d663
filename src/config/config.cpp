// SPDX-License-Identifier: Apache-2.0
// The agent's config file: read bounded, streamed through yaml-cpp's event API into the model,
// with upstream's semantics and errors that name file, line, key, value and fix.
#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/base/ascii.h"
#include "ip-masq-agent/base/bounded_file.h"
#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/config/plain_yaml.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <istream>
#include <streambuf>
#include <sys/stat.h>

#include <fmt/format.h>
#include <yaml-cpp/depthguard.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/exceptions.h>
#include <yaml-cpp/mark.h>
#include <yaml-cpp/parser.h>

namespace ipmasq {

namespace {

const char *const kRfc1918[] = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"};
const char *const kOtherReserved[] = {
	"100.64.0.0/10",   // RFC 6598, carrier-grade NAT
	"192.0.0.0/24",    // RFC 6890, IETF protocol assignments
	"192.0.2.0/24",    // RFC 5737, TEST-NET-1
	"192.88.99.0/24",  // RFC 7526, deprecated 6to4 relay anycast
	"198.18.0.0/15",   // RFC 2544, benchmarking
	"198.51.100.0/24", // RFC 5737, TEST-NET-2
	"203.0.113.0/24",  // RFC 5737, TEST-NET-3
	"240.0.0.0/4",     // RFC 1112, former class E
};

// A value quoted into a message is cut after this many bytes (and its length said).
constexpr size_t kShownBytes = 64;
// CIDRs and durations longer than this are refused before they are parsed: the longest
// CIDR is 49 bytes, and the parsers below would quote the whole text into their message.
constexpr size_t kMaxValueBytes = 100;
// describeConfig lists a list of up to this many entries in full, else the first few.
constexpr size_t kDescribedInFull = 16;
constexpr size_t kDescribedFirst = 8;

using ascii::isDigit;

std::string lower(std::string_view s)
{
	std::string out(s);
	for (char &c : out)
		if (ascii::isUpper(c))
			c = static_cast<char>(c - 'A' + 'a');
	return out;
}

// A user's value for a message: escaped, in quotes, and cut short if long.
std::string shown(std::string_view text)
{
	return quotedShort(text, kShownBytes);
}

// True if quoted() would print the text unchanged: printable ASCII without quote or
// backslash. Only such text is handed to parsers that put it into messages verbatim.
bool printsVerbatim(std::string_view text)
{
	return std::all_of(text.begin(), text.end(), [](char c) {
		const auto byte = static_cast<unsigned char>(c);
		return byte >= 0x20 && byte < 0x7f && c != '"' && c != '\\';
	});
}

enum class IntegerParse { ok, notAnInteger, outOfRange };

// What Go's decoder takes for an int: an optional sign and decimal digits. The bound is
// checked digit by digit before anything can overflow, so a 20,000-digit value costs
// 20,000 steps and no more.
IntegerParse parseBoundedInteger(std::string_view text, uint64_t max, uint64_t &out)
{
	bool negative = false;
	if (!text.empty() && (text[0] == '+' || text[0] == '-')) {
		negative = text[0] == '-';
		text.remove_prefix(1);
	}
	if (text.empty())
		return IntegerParse::notAnInteger;
	uint64_t value = 0;
	bool tooLarge = false;
	for (const char c : text) {
		if (!isDigit(c))
			return IntegerParse::notAnInteger;
		if (!tooLarge) {
			value = value * 10 + static_cast<uint64_t>(c - '0');
			tooLarge = value > max; // max < 2^63, so value * 10 cannot wrap next time
		}
	}
	if (tooLarge || (negative && value != 0))
		return IntegerParse::outOfRange;
	out = value;
	return IntegerParse::ok;
}

// A number as Go's JSON decoder would read it ([+-]digits[.digits][e[+-]digits]): for
// resyncInterval this is the mistake of leaving out the unit.
bool isBareNumber(std::string_view s)
{
	size_t i = 0;
	const auto digits = [&] {
		const size_t start = i;
		while (i < s.size() && isDigit(s[i]))
			i++;
		return i - start;
	};
	if (i < s.size() && (s[i] == '+' || s[i] == '-'))
		i++;
	if (digits() == 0)
		return false;
	if (i < s.size() && s[i] == '.') {
		i++;
		digits();
	}
	if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
		i++;
		if (i < s.size() && (s[i] == '+' || s[i] == '-'))
			i++;
		if (digits() == 0)
			return false;
	}
	return i == s.size();
}

// YAML 1.1 booleans exactly as yaml-cpp's convert<bool> reads them (the decisions of the
// earlier Node-based parser): y/n, yes/no, true/false, on/off, written in lower case,
// UPPER CASE or Capitalized.
std::optional<bool> parseYamlBool(std::string_view s)
{
	if (s.empty() || s.size() > 5)
		return std::nullopt;
	const auto all = [](std::string_view t, bool (*pred)(char)) {
		return std::all_of(t.begin(), t.end(), pred);
	};
	const bool flexibleCase = all(s, ascii::isLower) ||
		(ascii::isUpper(s[0]) && (all(s.substr(1), ascii::isLower) || all(s.substr(1), ascii::isUpper)));
	if (!flexibleCase)
		return std::nullopt;
	static constexpr std::array<std::pair<std::string_view, std::string_view>, 4> kNames{{
		{"y", "n"}, {"yes", "no"}, {"true", "false"}, {"on", "off"}}};
	const std::string l = lower(s);
	for (const auto &[yes, no] : kNames) {
		if (l == yes)
			return true;
		if (l == no)
			return false;
	}
	return std::nullopt;
}

// The text of a file already in memory as a read-only stream for yaml-cpp, which reads
// from a std::istream: copying it into a stringstream would double the peak.
class TextStreamBuf final : public std::streambuf
{
public:
	explicit TextStreamBuf(std::string_view text)
	{
		// The get area is only ever read (there is no put area), so dropping const is safe.
		char *begin = const_cast<char *>(text.data());
		setg(begin, begin, begin + text.size());
	}
};

enum class Key {
	nonMasqueradeCIDRs,
	cidrLimit,
	masqLinkLocal,
	masqLinkLocalIPv6,
	resyncInterval,
	masqueradeCIDRs,
	masqueradeSourceCIDRs,
	outputAddress,
	outputAddressIPv6,
	outputInterface,
	nonMasqueradeInterfaces,
	nonMasqueradeDiscovery
};
constexpr std::array<const char *, 12> kKeyNames{
	"nonMasqueradeCIDRs", "cidrLimit",	  "masqLinkLocal",     "masqLinkLocalIPv6",
	"resyncInterval",     "masqueradeCIDRs",  "masqueradeSourceCIDRs", "outputAddress",
	"outputAddressIPv6",  "outputInterface", "nonMasqueradeInterfaces",
	"nonMasqueradeDiscovery"};

// The keys of the nonMasqueradeDiscovery section (discovery_config.h).
enum class SectionKey { within, routeProtocols, routeInterfaces, flannelSubnetEnv, cniConfDir, holdDown };
constexpr std::array<const char *, 6> kSectionKeyNames{"within",	   "routeProtocols",
							"routeInterfaces",  "flannelSubnetEnv",
							"cniConfDir",	   "holdDown"};

const char *sectionKeyName(SectionKey key) { return kSectionKeyNames[static_cast<size_t>(key)]; }

bool isSectionList(SectionKey key)
{
	return key == SectionKey::within || key == SectionKey::routeProtocols ||
	       key == SectionKey::routeInterfaces;
}

// What a section key's value must be, for "expected ..., got ..." messages.
const char *sectionExpectation(SectionKey key)
{
	switch (key) {
	case SectionKey::within: return "expected a list of CIDR strings such as [\"10.244.0.0/16\"]";
	case SectionKey::routeProtocols:
		return "expected a list of route protocols such as [bird] or [\"186\"]";
	case SectionKey::routeInterfaces:
		return "expected a list of interface names such as [\"flannel.1\", \"cali*\"]";
	case SectionKey::flannelSubnetEnv:
	case SectionKey::cniConfDir: return "expected an absolute path such as \"/run/flannel/subnet.env\"";
	case SectionKey::holdDown: return "expected a duration string such as \"30s\"";
	}
	return "";
}

// The keys whose value is a list of CIDRs, each staged apart (see CidrList).
enum class ListId : uint8_t { nonMasquerade, masquerade, masqueradeSource };
constexpr size_t kCidrLists = 3;

std::optional<ListId> cidrListOf(Key key)
{
	switch (key) {
	case Key::nonMasqueradeCIDRs: return ListId::nonMasquerade;
	case Key::masqueradeCIDRs: return ListId::masquerade;
	case Key::masqueradeSourceCIDRs: return ListId::masqueradeSource;
	default: return std::nullopt;
	}
}

Key keyOf(ListId list)
{
	switch (list) {
	case ListId::nonMasquerade: return Key::nonMasqueradeCIDRs;
	case ListId::masquerade: return Key::masqueradeCIDRs;
	case ListId::masqueradeSource: return Key::masqueradeSourceCIDRs;
	}
	return Key::nonMasqueradeCIDRs;
}

// What cidrLimit says about a list's count, for messages: link-local is added to the
// non-masquerade list by the agent and is not counted.
const char *limitNote(ListId list)
{
	return list == ListId::nonMasquerade ? "; link-local is not counted" : "";
}

const char *keyName(Key key) { return kKeyNames[static_cast<size_t>(key)]; }

// The keys whose value is a list of interface names (a single name is taken too, as in
// upstream's PR #103).
bool isInterfaceList(Key key)
{
	return key == Key::outputInterface || key == Key::nonMasqueradeInterfaces;
}

// The key of `names` (kKeyNames, kSectionKeyNames) that `spelling` is, case-insensitively.
template<typename KeyEnum, size_t N>
std::optional<KeyEnum> knownKey(std::string_view spelling, const std::array<const char *, N> &names)
{
	if (spelling.size() > 32)
		return std::nullopt;
	const std::string l = lower(spelling);
	for (size_t i = 0; i < N; i++)
		if (l == lower(names[i]))
			return static_cast<KeyEnum>(i);
	return std::nullopt;
}

// What a key's value must be, for "expected ..., got ..." messages.
const char *expectation(Key key)
{
	switch (key) {
	case Key::nonMasqueradeCIDRs:
	case Key::masqueradeCIDRs:
	case Key::masqueradeSourceCIDRs:
		return "expected a list of CIDR strings such as [\"10.0.0.0/8\"]";
	case Key::cidrLimit: return "expected a whole number such as 64";
	case Key::masqLinkLocal:
	case Key::masqLinkLocalIPv6: return "expected true or false";
	case Key::resyncInterval: return "expected a duration string such as \"60s\"";
	case Key::outputAddress:
		return "expected an IPv4 address, range or CIDR such as \"203.0.113.7\", "
		       "\"203.0.113.7-203.0.113.9\" or \"203.0.113.0/24\"";
	case Key::outputAddressIPv6:
		return "expected an IPv6 address, range or CIDR such as \"2001:db8::7\"";
	case Key::outputInterface:
	case Key::nonMasqueradeInterfaces:
		return "expected a list of interface names such as [\"eth0\", \"vlan*\"]";
	case Key::nonMasqueradeDiscovery:
		return "expected a mapping such as {within: [\"10.244.0.0/16\"], routeProtocols: [bird]}";
	}
	return "";
}

enum class Kind { null, scalar, list, mapping };

// One value as the handler sees it. An alias arrives as the value its anchor recorded
// (a scalar's text, or only the kind of a collection): nothing is ever expanded.
struct Value {
	Kind kind = Kind::null;
	std::string_view text; // a scalar's text
	bool plain = true;     // not quoted: Go's decoder reads a quoted scalar as a string
	YAML::Mark mark;
	std::string_view alias; // the anchor's name, when the value is an alias

	std::string describe() const
	{
		switch (kind) {
		case Kind::null: return "null";
		case Kind::list: return alias.empty() ? "a list" : fmt::format("*{}, an alias of a list",
									 escaped(alias));
		case Kind::mapping:
			return alias.empty() ? "a mapping"
					     : fmt::format("*{}, an alias of a mapping", escaped(alias));
		case Kind::scalar: return fmt::format("{} {}", plain ? "a scalar" : "a quoted string",
						      shown(text));
		}
		return "";
	}
};

// A user error found while parsing, thrown inside the event handler and caught at its
// event boundary, where it is noted: from then on the handler builds nothing, but goes
// on reading to report every other error of the file too (the handler leaves its state
// where the next event is read right: a refused value is skipped whole). A `stops`
// refusal leaves no such state (a complex key, a list past its hard bound): every later
// event is ignored. Either way yaml-cpp finishes the document, so that a syntax error
// further on is what gets reported, alone, as the Node-based parser did (a misparse's
// consequences only confuse). Never leaves this file.
struct Refusal {
	Error error;
	bool stops = false;
};

// A user error that stops yaml-cpp at once: where going on would cost memory or
// recursion in yaml-cpp itself (anchors, nesting), or read a second document. Thrown
// through yaml-cpp (C++ throughout, made to unwind) and caught in parseText().
struct StopParsing {
	Error error;
};

// A parsed CIDR while the list is read: 24 bytes where a Prefix takes 80. cidrLimit may
// come after the list, so the list is kept until the end of the file, and a list that
// turns out to be over the limit (the hostile case) must cost little. Kept in a deque,
// which grows by blocks: no vector doubling, so the peak is this plus the final vector.
// The line fits in what was padding.
struct StagedPrefix {
	uint64_t high = 0;
	uint64_t low = 0;
	uint8_t length = 0;
	bool ipv6 = false;
	uint32_t line = 0; // 1-based, for Prefix::origin

	static StagedPrefix of(const Prefix &prefix, uint32_t line)
	{
		return StagedPrefix{static_cast<uint64_t>(prefix.network.value >> 64),
				    static_cast<uint64_t>(prefix.network.value),
				    static_cast<uint8_t>(prefix.length),
				    prefix.network.family == Family::ipv6, line};
	}
	// Without `spelling`: see Config::nonMasqueradeCIDRs. File 0: the one being parsed.
	Prefix toPrefix() const
	{
		Prefix prefix;
		prefix.network.family = ipv6 ? Family::ipv6 : Family::ipv4;
		prefix.network.value = (static_cast<AddressValue>(high) << 64) | low;
		prefix.length = length;
		prefix.origin = Origin{0, line};
		return prefix;
	}
};
static_assert(sizeof(StagedPrefix) == 24);

// One of the CIDR lists of the file, while it is read.
struct CidrList {
	bool seen = false; // the key is in the file (an explicit null empties the list)
	YAML::Mark mark = YAML::Mark::null_mark();
	std::deque<StagedPrefix> staged;
	size_t count = 0; // valid entries
	size_t items = 0; // entries, valid or not: the next one's index in messages
	bool limitReported = false; // more than cidrLimit was said once: not again
};

// Builds the Config from yaml-cpp's events. The config is one mapping of scalars and one
// list of scalars, so the state is a handful of positions plus a depth counter for the
// values of unknown keys, which are skipped without being looked at: no recursion, and
// memory is the model plus what the anchors recorded.
class ConfigHandler final : public YAML::EventHandler
{
public:
	ConfigHandler(const std::string &source, const ConfigFlags &flags)
		: source_(source), flags_(flags)
	{
		loaded_.config = defaultConfig(flags);
		loaded_.fromFile = true;
	}

	Result<LoadedConfig> finish();
	// The errors noted, and then the one that stopped yaml-cpp.
	Error stoppedBy(const Error &stop);

	void OnDocumentStart(const YAML::Mark &mark) override;
	void OnDocumentEnd() override {}
	void OnNull(const YAML::Mark &mark, YAML::anchor_t anchor) override;
	void OnAlias(const YAML::Mark &mark, YAML::anchor_t anchor) override;
	void OnScalar(const YAML::Mark &mark, const std::string &tag, YAML::anchor_t anchor,
		      const std::string &value) override;
	void OnSequenceStart(const YAML::Mark &mark, const std::string &tag, YAML::anchor_t anchor,
			     YAML::EmitterStyle::value style) override;
	void OnSequenceEnd() override
	{
		guarded([&] { onCollectionEnd(); });
	}
	void OnMapStart(const YAML::Mark &mark, const std::string &tag, YAML::anchor_t anchor,
			YAML::EmitterStyle::value style) override;
	void OnMapEnd() override
	{
		guarded([&] { onCollectionEnd(); });
	}
	void OnAnchor(const YAML::Mark &mark, const std::string &name) override;

private:
	// Where the handler is: before the root, at a key or a value of the root mapping, in
	// a CIDR list or an interface list, inside a skipped value (skipDepth_ deep), before
	// a value to skip, at a key or a value of the nonMasqueradeDiscovery section or in
	// one of its lists, or after the root. A skipped value returns to skipReturn_.
	enum class State {
		root, key, value, cidrs, names, skip, skipNext, section, sectionValue, sectionList, done
	};

	struct Anchor {
		std::string name;
		Kind kind = Kind::null;
		std::string text;
		bool plain = true;
	};

	struct SeenKey {
		std::string spelling;
		YAML::Mark mark;
	};

	std::string at(const YAML::Mark &mark) const
	{
		if (mark.is_null())
			return fmt::format("{}: ", escaped(source_));
		return fmt::format("{}:{}:{}: ", escaped(source_), mark.line + 1, mark.column + 1);
	}
	// "file:line:col: key: ", so that every message points at what to edit.
	std::string where(const YAML::Mark &mark, std::string_view key) const
	{
		return fmt::format("{}{}: ", at(mark), key);
	}
	[[noreturn]] static void refuse(std::string message) { throw Refusal{Error(std::move(message))}; }
	// A refusal after which the handler's state cannot be trusted: nothing more is read.
	[[noreturn]] static void refuseAndStop(std::string message)
	{
		throw Refusal{Error(std::move(message)), true};
	}
	// The collection that starts now is skipped whole, then `back` reads on.
	void skipCollection(State back)
	{
		state_ = State::skip;
		skipDepth_ = 1;
		skipReturn_ = back;
	}
	// The next value (a scalar, or a collection whole) is skipped, then `back` reads on.
	void skipNextValue(State back)
	{
		state_ = State::skipNext;
		skipReturn_ = back;
	}
	[[noreturn]] static void stopParsing(std::string message)
	{
		throw StopParsing{Error(std::move(message))};
	}

	// Runs one event's handling; a refusal is noted, and after one that stops, every
	// later event is ignored.
	template<typename Handling>
	void guarded(Handling &&handling)
	{
		if (stopped_)
			return;
		try {
			handling();
		} catch (Refusal &refusal) {
			noteError(std::move(refusal.error), refusal.stops);
		}
	}
	void noteError(Error error, bool stops = false);
	std::string errorsMessage() const;

	void countValue(const YAML::Mark &mark);
	void recordAnchor(YAML::anchor_t anchor, Kind kind, std::string_view text = {}, bool plain = true);
	void onValue(const Value &value);
	void onCollectionStart(Kind kind, const YAML::Mark &mark);
	void onValueCollectionStart(Kind kind, const YAML::Mark &mark);
	void onCollectionEnd();

	void onKey(const Value &key);
	void onUnknownKey(std::string_view spelling, const YAML::Mark &mark);
	void onKnownValue(Key key, const Value &value);
	// nonMasqueradeDiscovery given as a single value: null (no section), or the wrong type.
	void onDiscoveryValue(const Value &value);
	void onCidrListStart(ListId list, const YAML::Mark &mark);
	void onCidr(const Value &item);
	void checkListAgainstLimit(ListId list);
	std::string itemKey(size_t index) const;
	CidrList &currentList() { return lists_[static_cast<size_t>(currentList_)]; }
	void readInt(const Value &value, Key key, int &out);
	void readBool(const Value &value, Key key, bool &out);
	void readDuration(const Value &value);
	std::optional<Duration> durationOf(const Value &value, const std::string &key,
					   const char *expected);

	void onSectionStart(const YAML::Mark &mark);
	void onSectionKey(const Value &key);
	void onSectionValue(SectionKey key, const Value &value);
	void onSectionListStart(SectionKey key);
	void onSectionItem(const Value &item);
	void readSectionPath(const Value &value, SectionKey key, std::optional<DiscoveryPath> &out);
	void readHoldDown(const Value &value);
	std::string sectionKeyText(SectionKey key) const;
	NonMasqueradeDiscovery &section() { return *loaded_.config.nonMasqueradeDiscovery; }
	Status finishSection();
	void checkWholeFile();
	void readOutputAddress(const Value &value, Key key, Family family,
			       std::optional<OutputAddress> &out);
	std::vector<InterfacePattern> &interfaceList(Key key);
	void onInterfaceListStart(Key key);
	void onInterfaceName(const Value &item);
	std::string depthError(const YAML::Mark &mark) const;

	const std::string &source_;
	const ConfigFlags &flags_;
	LoadedConfig loaded_;
	// The errors noted, the first kMaxReportedConfigErrors of them, and how many in all.
	std::vector<std::string> errors_;
	size_t errorCount_ = 0;
	bool stopped_ = false; // an error that stops: every later event is ignored

	State state_ = State::root;
	int documents_ = 0;
	int skipDepth_ = 0;
	State skipReturn_ = State::key;
	size_t values_ = 0;
	std::optional<Key> valueKey_; // in State::value: the key, or nullopt for an unknown one

	std::array<std::optional<SeenKey>, kKeyNames.size()> seenKeys_;
	std::vector<SeenKey> unknownKeys_;
	std::vector<Anchor> anchors_; // yaml-cpp numbers anchors 1, 2, ... per document
	std::string pendingAnchorName_;
	size_t anchorNames_ = 0;

	// The CIDR lists, indexed by ListId; in State::cidrs, currentList_ is being read.
	std::array<CidrList, kCidrLists> lists_;
	ListId currentList_ = ListId::nonMasquerade;
	bool cidrLimitFinal_ = false; // the cidrLimit key was read: the limit cannot change
	// In State::names: the interface list being read.
	Key currentNames_ = Key::outputInterface;

	// The nonMasqueradeDiscovery section: where it starts, its keys seen, and in
	// State::sectionValue and State::sectionList the key being read.
	YAML::Mark sectionMark_ = YAML::Mark::null_mark();
	std::array<std::optional<SeenKey>, kSectionKeyNames.size()> seenSectionKeys_;
	SectionKey sectionKey_ = SectionKey::within;
	size_t sectionItems_ = 0; // in State::sectionList: the items of the list so far
	size_t namesItems_ = 0;   // in State::names: the same, for the interface list
};

void ConfigHandler::noteError(Error error, bool stops)
{
	// No config comes out of a file with an error: the staged lists go now.
	if (errorCount_++ == 0)
		for (CidrList &list : lists_)
			std::deque<StagedPrefix>().swap(list.staged);
	if (errors_.size() < kMaxReportedConfigErrors)
		errors_.push_back(std::move(error.message));
	stopped_ = stopped_ || stops;
}

// One error as it is; several numbered, in the order of the file, the rest counted.
std::string ConfigHandler::errorsMessage() const
{
	if (errors_.size() == 1 && errorCount_ == 1)
		return errors_.front();
	std::string out = fmt::format("{}: {} errors (fix each of them):", escaped(source_), errorCount_);
	for (size_t i = 0; i < errors_.size(); i++)
		out += fmt::format(" [{}] {}{}", i + 1, errors_[i], i + 1 < errors_.size() ? ";" : "");
	if (errorCount_ > errors_.size())
		out += fmt::format("; and {} more after these (only the first {} are listed)",
				   errorCount_ - errors_.size(), kMaxReportedConfigErrors);
	return out;
}

Error ConfigHandler::stoppedBy(const Error &stop)
{
	noteError(stop, true);
	return Error(errorsMessage());
}

void ConfigHandler::OnDocumentStart(const YAML::Mark &mark)
{
	if (++documents_ > 1)
		stopParsing(fmt::format("{}a second YAML document starts here; the config must be "
					"one document: remove this \"---\" and what follows it, or "
					"merge the two", at(mark)));
}

void ConfigHandler::OnAnchor(const YAML::Mark &mark, const std::string &name)
{
	// yaml-cpp keeps every anchor name itself: stop before that can grow with the file.
	if (++anchorNames_ > kMaxConfigAnchors)
		stopParsing(fmt::format("{}more than {} anchors (&name); an ip-masq-agent config "
					"needs few if any: write the values out", at(mark),
					kMaxConfigAnchors));
	pendingAnchorName_ = name;
}

// Every value counts, read or skipped, before and after a refusal: this is what bounds
// the time and yaml-cpp's own memory on a file of millions of tiny values.
void ConfigHandler::countValue(const YAML::Mark &mark)
{
	if (++values_ > kMaxConfigValues)
		stopParsing(fmt::format("{}more than {} values (scalars, lists and mappings) in the "
					"file; a config holds at most {} CIDRs and a few keys: is this "
					"the right file?", at(mark), kMaxConfigValues,
					kMaxNonMasqueradeCIDRs));
}

void ConfigHandler::recordAnchor(YAML::anchor_t anchor, Kind kind, std::string_view text, bool plain)
{
	if (anchor == YAML::NullAnchor)
		return;
	if (anchors_.size() < anchor)
		anchors_.resize(anchor);
	Anchor &slot = anchors_[anchor - 1];
	slot.name = std::move(pendingAnchorName_);
	pendingAnchorName_.clear();
	slot.kind = kind;
	// Only scalars keep their text: an alias of a collection is refused where it matters
	// (and ignored where it does not), so no collection is ever copied.
	slot.text = std::string(text);
	slot.plain = plain;
}

void ConfigHandler::OnNull(const YAML::Mark &mark, YAML::anchor_t anchor)
{
	countValue(mark);
	guarded([&] {
		recordAnchor(anchor, Kind::null);
		onValue(Value{Kind::null, {}, true, mark, {}});
	});
}

void ConfigHandler::OnScalar(const YAML::Mark &mark, const std::string &tag, YAML::anchor_t anchor,
			     const std::string &text)
{
	// yaml-cpp tags a quoted scalar "!" and a plain one "?" (or with an explicit tag).
	const bool plain = tag != "!";
	countValue(mark);
	guarded([&] {
		recordAnchor(anchor, Kind::scalar, text, plain);
		onValue(Value{Kind::scalar, text, plain, mark, {}});
	});
}

void ConfigHandler::OnAlias(const YAML::Mark &mark, YAML::anchor_t anchor)
{
	countValue(mark);
	guarded([&] {
		if (state_ == State::skip)
			return; // aliases inside an ignored value cost nothing: they are not followed
		if (state_ == State::skipNext) {
			state_ = skipReturn_;
			return;
		}
		if (anchor == YAML::NullAnchor || anchor > anchors_.size())
			refuseAndStop(fmt::format("{}an alias refers to an anchor that is not defined "
						  "before it", at(mark)));
		const Anchor &target = anchors_[anchor - 1];
		onValue(Value{target.kind, target.text, target.plain, mark, target.name});
	});
}

void ConfigHandler::OnSequenceStart(const YAML::Mark &mark, const std::string &, YAML::anchor_t anchor,
				    YAML::EmitterStyle::value)
{
	countValue(mark);
	guarded([&] {
		recordAnchor(anchor, Kind::list);
		onCollectionStart(Kind::list, mark);
	});
}

void ConfigHandler::OnMapStart(const YAML::Mark &mark, const std::string &, YAML::anchor_t anchor,
			       YAML::EmitterStyle::value)
{
	countValue(mark);
	guarded([&] {
		recordAnchor(anchor, Kind::mapping);
		onCollectionStart(Kind::mapping, mark);
	});
}

std::string ConfigHandler::depthError(const YAML::Mark &mark) const
{
	return fmt::format("{}nested more than {} levels deep; an ip-masq-agent config is one "
			   "mapping with one list in it: check the indentation", at(mark),
			   kMaxConfigDepth);
}

// A scalar, null or alias: a whole value in one event.
void ConfigHandler::onValue(const Value &value)
{
	switch (state_) {
	case State::root:
		if (value.kind == Kind::null)
			return; // an empty document: all defaults
		refuseAndStop(fmt::format("{}the config must be a mapping of keys such as "
				   "nonMasqueradeCIDRs and cidrLimit, but it is {}",
				   at(value.mark), value.describe()));
	case State::key: onKey(value); return;
	case State::value:
		state_ = State::key;
		if (valueKey_)
			onKnownValue(*valueKey_, value);
		return; // an unknown key's scalar value: ignored
	case State::cidrs: onCidr(value); return;
	case State::names: onInterfaceName(value); return;
	case State::section: onSectionKey(value); return;
	case State::sectionValue:
		state_ = State::section;
		onSectionValue(sectionKey_, value);
		return;
	case State::sectionList: onSectionItem(value); return;
	case State::skipNext: state_ = skipReturn_; return;
	case State::skip:
	case State::done: return;
	}
}

// A list or mapping as a key's value: an unknown key's (skipped), a list of CIDRs or
// interfaces, the discovery section; anything else is the wrong type for the key.
void ConfigHandler::onValueCollectionStart(Kind kind, const YAML::Mark &mark)
{
	if (!valueKey_)
		return skipCollection(State::key); // an unknown key's value: counted through, not read
	if (const auto list = cidrListOf(*valueKey_); list && kind == Kind::list)
		return onCidrListStart(*list, mark);
	if (isInterfaceList(*valueKey_) && kind == Kind::list)
		return onInterfaceListStart(*valueKey_);
	if (*valueKey_ == Key::nonMasqueradeDiscovery && kind == Kind::mapping)
		return onSectionStart(mark);
	skipCollection(State::key);
	refuse(fmt::format("{}{}, got {}", where(mark, keyName(*valueKey_)), expectation(*valueKey_),
			   kind == Kind::list ? "a list" : "a mapping"));
}

void ConfigHandler::onCollectionStart(Kind kind, const YAML::Mark &mark)
{
	const char *got = kind == Kind::list ? "a list" : "a mapping";
	switch (state_) {
	case State::root:
		if (kind != Kind::mapping)
			refuseAndStop(fmt::format("{}the config must be a mapping of keys such as "
						  "nonMasqueradeCIDRs and cidrLimit, but it is a list",
						  at(mark)));
		state_ = State::key;
		return;
	case State::key:
		refuseAndStop(fmt::format("{}a key must be a name such as nonMasqueradeCIDRs, but this "
					  "one is {} (a complex key): write the key as plain text",
					  at(mark), got));
	case State::value: return onValueCollectionStart(kind, mark);
	case State::cidrs: {
		const size_t index = currentList().items++;
		skipCollection(State::cidrs);
		refuse(fmt::format("{}expected a CIDR string such as \"10.0.0.0/8\", got {}",
				   where(mark, itemKey(index)), got));
	}
	case State::names: {
		const size_t index = namesItems_++;
		skipCollection(State::names);
		refuse(fmt::format("{}expected an interface name such as \"eth0\", got {}",
				   where(mark, fmt::format("{}[{}]", keyName(currentNames_), index)), got));
	}
	case State::section:
		refuseAndStop(fmt::format("{}a key must be a name such as within, but this one is {} "
					  "(a complex key): write the key as plain text",
					  where(mark, keyName(Key::nonMasqueradeDiscovery)), got));
	case State::sectionValue:
		if (isSectionList(sectionKey_) && kind == Kind::list) {
			onSectionListStart(sectionKey_);
			return;
		}
		skipCollection(State::section);
		refuse(fmt::format("{}{}, got {}", where(mark, sectionKeyText(sectionKey_)),
				   sectionExpectation(sectionKey_), got));
	case State::sectionList: {
		const size_t index = sectionItems_++;
		skipCollection(State::sectionList);
		refuse(fmt::format("{}{}, got {} as an entry",
				   where(mark, fmt::format("{}[{}]", sectionKeyText(sectionKey_), index)),
				   sectionExpectation(sectionKey_), got));
	}
	case State::skipNext: return skipCollection(skipReturn_);
	case State::skip:
		// The root mapping and the unknown key's value are two levels already.
		if (++skipDepth_ + 1 > kMaxConfigDepth)
			stopParsing(depthError(mark));
		return;
	case State::done: return;
	}
}

void ConfigHandler::onCollectionEnd()
{
	switch (state_) {
	case State::key: state_ = State::done; return; // the root mapping ends
	case State::cidrs:
	case State::names: state_ = State::key; return;
	case State::section: state_ = State::key; return; // the section's mapping ends
	case State::sectionList: state_ = State::section; return;
	case State::skip:
		if (--skipDepth_ == 0)
			state_ = skipReturn_;
		return;
	default: return;
	}
}

void ConfigHandler::onKey(const Value &key)
{
	// Until the key is known good, its value is skipped as an unknown key's: a refused
	// key's value is then read as nothing, and the next key as a key.
	state_ = State::value;
	valueKey_.reset();
	if (!key.alias.empty())
		refuse(fmt::format("{}an alias (*{}) cannot be a key: write the key itself",
				   at(key.mark), escaped(key.alias)));
	if (key.kind == Kind::list || key.kind == Kind::mapping)
		refuse(fmt::format("{}a key must be a name such as nonMasqueradeCIDRs, but this one is {}",
				   at(key.mark), key.describe()));
	if (key.kind == Kind::scalar && key.plain && key.text == "<<")
		refuse(fmt::format("{}merge keys (<<) are not supported: write the keys out in the "
				   "config's mapping", at(key.mark)));
	// yaml-cpp's Node API read a null key as the text "null": keep that (an unknown key).
	const std::string_view spelling = key.kind == Kind::null ? std::string_view("null") : key.text;

	const std::optional<Key> known = knownKey<Key>(spelling, kKeyNames);
	if (!known)
		return onUnknownKey(spelling, key.mark);
	const char *canonical = keyName(*known);
	auto &seen = seenKeys_[static_cast<size_t>(*known)];
	// Upstream matches keys case-insensitively (Go's encoding/json), so "cidrLimit"
	// and "CIDRLimit" are one key: a second one would silently win there.
	if (seen)
		refuse(fmt::format("{}{}: duplicate key: it is already set at line {}, column {}{}; "
				   "keys match case-insensitively, as in upstream: keep one of them",
				   at(key.mark), canonical, seen->mark.line + 1, seen->mark.column + 1,
				   seen->spelling == spelling ? ""
							      : fmt::format(" (as {})", shown(seen->spelling))));
	seen = SeenKey{std::string(spelling), key.mark};
	valueKey_ = known;
	// Point out the spelling that every other tool expects.
	if (spelling != canonical)
		loaded_.warnings.push_back(fmt::format("{}{}: read as \"{}\"; please spell it exactly so",
						       at(key.mark), escaped(spelling), canonical));
}

// A key the agent does not know: upstream ignores it, and so does the agent, loudly (the
// warning names the key it most likely means); with --strict-config it is an error.
void ConfigHandler::onUnknownKey(std::string_view spelling, const YAML::Mark &mark)
{
	for (const SeenKey &seen : unknownKeys_)
		if (seen.spelling == spelling)
			refuse(fmt::format("{}duplicate key {}: it is already set at line {}, column {}: "
					   "keep one of them", at(mark), shown(spelling),
					   seen.mark.line + 1, seen.mark.column + 1));
	if (unknownKeys_.size() >= kMaxUnknownConfigKeys)
		refuseAndStop(fmt::format("{}more than {} unknown keys; is this the ip-masq-agent "
					  "config? (known keys: {})", at(mark), kMaxUnknownConfigKeys,
					  fmt::join(kKeyNames, ", ")));
	unknownKeys_.push_back(SeenKey{std::string(spelling), mark});
	const std::optional<std::string_view> meant = suggestKey(spelling);
	const std::string guess = meant ? fmt::format(": did you mean \"{}\"?", *meant)
					: fmt::format(" (known keys: {})", fmt::join(kKeyNames, ", "));
	if (flags_.strictKeys)
		refuse(fmt::format("{}unknown key {} (--strict-config: unknown keys are errors): {}",
				   at(mark), shown(spelling),
				   meant ? fmt::format("did you mean \"{}\"? Fix its spelling, or remove it", *meant)
					 : fmt::format("remove it, or fix its spelling (known keys: {})",
						       fmt::join(kKeyNames, ", "))));
	std::string warning = fmt::format("{}ignoring unknown key {}{}", at(mark), shown(spelling), guess);
	loaded_.unknownKeys.push_back(warning);
	loaded_.warnings.push_back(std::move(warning));
}

void ConfigHandler::onKnownValue(Key key, const Value &value)
{
	// An alias of anything but a single value is refused (with the other wrong types
	// below): following it would copy, and an alias can repeat a list without end.
	const std::optional<ListId> list = cidrListOf(key);
	if (list && value.kind == Kind::list)
		refuse(fmt::format("{}*{} is an alias of a list; aliases of lists and mappings are "
				   "not supported (only of single values): write the list here",
				   where(value.mark, keyName(key)), escaped(value.alias)));
	switch (key) {
	case Key::nonMasqueradeCIDRs:
	case Key::masqueradeCIDRs:
	case Key::masqueradeSourceCIDRs:
		if (value.kind != Kind::null)
			refuse(fmt::format("{}{}, got {}", where(value.mark, keyName(key)), expectation(key),
					   value.describe()));
		onCidrListStart(*list, value.mark); // an explicit null empties the list, as in upstream
		state_ = State::key;
		return;
	case Key::cidrLimit:
		readInt(value, key, loaded_.config.cidrLimit);
		loaded_.cidrLimitGiven = value.kind != Kind::null;
		cidrLimitFinal_ = true;
		// A list before cidrLimit was only checked against the hard maximum.
		for (size_t i = 0; i < kCidrLists; i++)
			checkListAgainstLimit(static_cast<ListId>(i));
		return;
	case Key::masqLinkLocal: readBool(value, key, loaded_.config.masqLinkLocal); return;
	case Key::masqLinkLocalIPv6: readBool(value, key, loaded_.config.masqLinkLocalIPv6); return;
	case Key::resyncInterval: readDuration(value); return;
	case Key::outputAddress:
		readOutputAddress(value, key, Family::ipv4, loaded_.config.outputAddress);
		return;
	case Key::outputAddressIPv6:
		readOutputAddress(value, key, Family::ipv6, loaded_.config.outputAddressIPv6);
		return;
	case Key::outputInterface:
	case Key::nonMasqueradeInterfaces:
		if (value.kind == Kind::list || value.kind == Kind::mapping)
			refuse(fmt::format("{}*{} is an alias of a collection; aliases of lists and "
					   "mappings are not supported (only of single values): write "
					   "the names here", where(value.mark, keyName(key)),
					   escaped(value.alias)));
		// null empties the list; a single name is a list of one (as upstream's PR #103).
		onInterfaceListStart(key);
		state_ = State::key;
		if (value.kind == Kind::scalar)
			onInterfaceName(value);
		return;
	case Key::nonMasqueradeDiscovery: onDiscoveryValue(value); return;
	}
}

void ConfigHandler::onDiscoveryValue(const Value &value)
{
	const Key key = Key::nonMasqueradeDiscovery;
	// null: no section, as if the key were absent (all its keys commented out).
	if (value.kind == Kind::null)
		return;
	if (value.kind == Kind::mapping)
		refuse(fmt::format("{}*{} is an alias of a mapping; aliases of lists and mappings "
				   "are not supported (only of single values): write the section "
				   "here", where(value.mark, keyName(key)), escaped(value.alias)));
	refuse(fmt::format("{}{}, got {}", where(value.mark, keyName(key)), expectation(key),
			   value.describe()));
}

void ConfigHandler::readOutputAddress(const Value &value, Key key, Family family,
				      std::optional<OutputAddress> &out)
{
	if (value.kind == Kind::null) {
		out.reset();
		return;
	}
	if (value.kind != Kind::scalar)
		refuse(fmt::format("{}{}, got {}", where(value.mark, keyName(key)), expectation(key),
				   value.describe()));
	const std::string_view text = value.text;
	// parseOutputAddress quotes its input into its messages as it is (see onCidr).
	if (text.size() > kMaxValueBytes || !printsVerbatim(text))
		refuse(fmt::format("{}{}, got {}", where(value.mark, keyName(key)), expectation(key),
				   shown(text)));
	auto parsed = parseOutputAddress(text);
	if (!parsed)
		throw Refusal{parsed.error().withContext(where(value.mark, keyName(key)))};
	if (parsed->family() != family)
		refuse(fmt::format("{}{} is an {} {}; {} takes {} only: write it in {}",
				   where(value.mark, keyName(key)), shown(text),
				   familyName(parsed->family()),
				   parsed->form == OutputAddress::Form::subnet ? "CIDR" : "address",
				   keyName(key), familyName(family),
				   keyName(family == Family::ipv4 ? Key::outputAddressIPv6
								  : Key::outputAddress)));
	if (family == Family::ipv6 && !flags_.enableIpv6)
		refuse(fmt::format("{}IPv6 is not enabled: start the agent with --enable-ipv6, or "
				   "remove this key", where(value.mark, keyName(key))));
	parsed->origin = Origin{0, static_cast<uint32_t>(value.mark.line + 1)};
	out = std::move(*parsed);
}

std::vector<InterfacePattern> &ConfigHandler::interfaceList(Key key)
{
	return key == Key::outputInterface ? loaded_.config.outputInterfaces
					   : loaded_.config.nonMasqueradeInterfaces;
}

void ConfigHandler::onInterfaceListStart(Key key)
{
	currentNames_ = key;
	namesItems_ = 0;
	interfaceList(key).clear();
	state_ = State::names;
}

void ConfigHandler::onInterfaceName(const Value &item)
{
	std::vector<InterfacePattern> &list = interfaceList(currentNames_);
	const size_t index = namesItems_++;
	const auto here = [&] {
		return where(item.mark, fmt::format("{}[{}]", keyName(currentNames_), index));
	};
	if (item.kind != Kind::scalar)
		refuse(fmt::format("{}expected an interface name such as \"eth0\", got {}", here(),
				   item.describe()));
	if (index >= kMaxInterfacePatterns)
		refuseAndStop(fmt::format("{}more than {} names; list the interfaces with wildcards "
					  "such as \"eth*\"", here(), kMaxInterfacePatterns));
	// parseInterfacePattern quotes its input as it is: give it text that prints as itself.
	if (item.text.size() > kMaxValueBytes || !printsVerbatim(item.text))
		refuse(fmt::format("{}{} is not an interface name", here(), shown(item.text)));
	auto pattern = parseInterfacePattern(item.text);
	if (!pattern)
		throw Refusal{pattern.error().withContext(here())};
	pattern->origin = Origin{0, static_cast<uint32_t>(item.mark.line + 1)};
	list.push_back(std::move(*pattern));
}

void ConfigHandler::onCidrListStart(ListId list, const YAML::Mark &mark)
{
	currentList_ = list;
	CidrList &current = currentList();
	current.seen = true;
	current.mark = mark;
	state_ = State::cidrs;
}

// "masqueradeCIDRs[3]": the list being read and the index of an entry.
std::string ConfigHandler::itemKey(size_t index) const
{
	return fmt::format("{}[{}]", keyName(keyOf(currentList_)), index);
}

// cidrLimit bounds each list on its own; a list over it is said once.
void ConfigHandler::checkListAgainstLimit(ListId id)
{
	CidrList &list = lists_[static_cast<size_t>(id)];
	if (list.count > static_cast<size_t>(loaded_.config.cidrLimit) && !list.limitReported) {
		list.limitReported = true;
		refuse(fmt::format("{}{} entries, more than cidrLimit ({}{}). Remove entries, or "
				   "raise cidrLimit in the same file",
				   where(list.mark, keyName(keyOf(id))), list.count,
				   loaded_.config.cidrLimit, limitNote(id)));
	}
}

void ConfigHandler::onCidr(const Value &item)
{
	// Formatted only for a message: this runs for each of up to a million entries.
	const size_t index = currentList().items++;
	const auto here = [&] { return where(item.mark, itemKey(index)); };
	if (item.kind != Kind::scalar)
		refuse(fmt::format("{}expected a CIDR string such as \"10.0.0.0/8\", got {}",
				   here(), item.describe()));
	const std::string_view text = item.text;
	// parsePrefix quotes its input into its messages as it is: give it only short text
	// that prints as itself.
	if (text.size() > kMaxValueBytes || !printsVerbatim(text))
		refuse(fmt::format("{}CIDR {} could not be parsed: a CIDR is an address, \"/\" and a "
				   "length, such as \"10.0.0.0/8\" or \"2001:db8::/32\"",
				   here(), shown(text)));
	auto prefix = parsePrefix(text);
	if (!prefix)
		throw Refusal{prefix.error().withContext(here())};
	if (prefix->network.family == Family::ipv6 && !flags_.enableIpv6)
		refuse(fmt::format("{}{} is an IPv6 CIDR but IPv6 is not enabled: start the agent with "
				   "--enable-ipv6, or remove this entry", here(), shown(text)));

	CidrList &list = currentList();
	const size_t count = ++list.count;
	// Stop as soon as the list is too long: past the hard maximum, or past cidrLimit when
	// that came first (it is final then; else it may still come, and is checked then).
	if (count > kMaxNonMasqueradeCIDRs)
		refuseAndStop(fmt::format("{}more than {} entries, the most the agent takes whatever "
					  "cidrLimit says. Merge adjacent CIDRs into shorter prefixes",
					  here(), kMaxNonMasqueradeCIDRs));
	if (cidrLimitFinal_ && count > static_cast<size_t>(loaded_.config.cidrLimit) &&
	    !list.limitReported) {
		list.limitReported = true;
		refuse(fmt::format("{}{} entries or more, more than cidrLimit ({}{}). Remove entries, "
				   "or raise cidrLimit in the same file", here(), count,
				   loaded_.config.cidrLimit, limitNote(currentList_)));
	}
	if (errorCount_ == 0) // else no config comes of the file: nothing to keep
		list.staged.push_back(StagedPrefix::of(*prefix, static_cast<uint32_t>(item.mark.line + 1)));
}

void ConfigHandler::readInt(const Value &value, Key key, int &out)
{
	if (value.kind == Kind::null)
		return; // null keeps the default, as Go's decoder does
	uint64_t number = 0;
	// Go's JSON decoder (which upstream feeds YAML through) treats a quoted scalar as a
	// string: `cidrLimit: "64"` fails there, so it fails here too, instead of guessing.
	const IntegerParse parsed = value.kind == Kind::scalar
		? parseBoundedInteger(value.text, kMaxCidrLimit, number)
		: IntegerParse::notAnInteger;
	if (parsed == IntegerParse::notAnInteger || !value.plain)
		refuse(fmt::format("{}{}, got {}{}", where(value.mark, keyName(key)), expectation(key),
				   value.describe(),
				   parsed == IntegerParse::notAnInteger ? "" : " (write it without quotes)"));
	if (parsed == IntegerParse::outOfRange)
		refuse(fmt::format("{}{} is out of range: use a number from 0 to {}",
				   where(value.mark, keyName(key)), shown(value.text), kMaxCidrLimit));
	out = static_cast<int>(number);
}

void ConfigHandler::readBool(const Value &value, Key key, bool &out)
{
	if (value.kind == Kind::null)
		return;
	const std::optional<bool> parsed =
		value.kind == Kind::scalar ? parseYamlBool(value.text) : std::nullopt;
	if (!parsed || !value.plain)
		refuse(fmt::format("{}{}, got {}{}", where(value.mark, keyName(key)), expectation(key),
				   value.describe(), parsed ? " (write it without quotes)" : ""));
	out = *parsed;
}

// A duration value: null gives nullopt (the default holds); anything but a Go duration
// with a unit is refused.
std::optional<Duration> ConfigHandler::durationOf(const Value &value, const std::string &key,
						  const char *expected)
{
	if (value.kind == Kind::null)
		return std::nullopt;
	if (value.kind != Kind::scalar)
		refuse(fmt::format("{}{}, got {}", where(value.mark, key), expected, value.describe()));
	const std::string_view text = value.text;
	if (value.plain && isBareNumber(text))
		refuse(fmt::format("{}{} is a bare number; like upstream, the agent needs a duration "
				   "with a unit: {}", where(value.mark, key), shown(text),
				   text.size() <= kShownBytes
					   ? fmt::format("write \"{}s\" for {} seconds", text, text)
					   : std::string("write the seconds followed by \"s\", such as \"60s\"")));
	// parseGoDuration quotes its input into its messages as it is (see onCidr): give it
	// only short text, and use its message only if the text prints as itself.
	const auto notADuration = [&] {
		refuse(fmt::format("{}{} is not a duration (write e.g. \"60s\", \"1m30s\", \"1.5h\" "
				   "or \"300ms\")", where(value.mark, key), shown(text)));
	};
	if (text.size() > kMaxValueBytes)
		notADuration();
	auto duration = parseGoDuration(text);
	if (!duration && !printsVerbatim(text))
		notADuration();
	if (!duration)
		throw Refusal{duration.error().withContext(where(value.mark, key))};
	return *duration;
}

void ConfigHandler::readDuration(const Value &value)
{
	const char *key = keyName(Key::resyncInterval);
	std::optional<Duration> duration = durationOf(value, key, expectation(Key::resyncInterval));
	if (!duration)
		return;
	if (*duration < kMinResyncInterval) {
		loaded_.warnings.push_back(fmt::format(
			"{}{} is below the minimum; using {} (a shorter interval would only burn CPU: "
			"config changes are picked up at once anyway)",
			where(value.mark, key), shown(value.text), formatGoDuration(kMinResyncInterval)));
		*duration = kMinResyncInterval;
	}
	loaded_.config.resyncInterval = *duration;
	loaded_.resyncIntervalGiven = true;
}

void ConfigHandler::onSectionStart(const YAML::Mark &mark)
{
	NonMasqueradeDiscovery discovery;
	discovery.written.origin = Origin{0, static_cast<uint32_t>(mark.line + 1)};
	loaded_.config.nonMasqueradeDiscovery = std::move(discovery);
	sectionMark_ = mark;
	state_ = State::section;
}

// "nonMasqueradeDiscovery.holdDown": where a message about a key of the section points.
std::string ConfigHandler::sectionKeyText(SectionKey key) const
{
	return fmt::format("{}.{}", keyName(Key::nonMasqueradeDiscovery), sectionKeyName(key));
}

void ConfigHandler::onSectionKey(const Value &key)
{
	const char *section = keyName(Key::nonMasqueradeDiscovery);
	// Until the key is known good, its value is to be skipped (as onKey does).
	skipNextValue(State::section);
	if (!key.alias.empty())
		refuse(fmt::format("{}an alias (*{}) cannot be a key: write the key itself",
				   where(key.mark, section), escaped(key.alias)));
	if (key.kind != Kind::scalar)
		refuse(fmt::format("{}a key must be a name such as within, but this one is {}",
				   where(key.mark, section), key.describe()));
	const std::optional<SectionKey> known = knownKey<SectionKey>(key.text, kSectionKeyNames);
	// Unlike the top level (upstream's keys), the section is the agent's own: a key it
	// does not know is a typo of one it does, and reading the rest would discover less
	// than the operator meant.
	if (!known) {
		const std::optional<std::string_view> meant = suggestKey(key.text, true);
		refuse(fmt::format("{}unknown key {}{} (the section's keys: {}): fix its spelling",
				   where(key.mark, section), shown(key.text),
				   meant ? fmt::format(": did you mean \"{}\"?", *meant) : "",
				   fmt::join(kSectionKeyNames, ", ")));
	}
	const char *canonical = sectionKeyName(*known);
	auto &seen = seenSectionKeys_[static_cast<size_t>(*known)];
	if (seen)
		refuse(fmt::format("{}{}: duplicate key: it is already set at line {}, column {}{}; keys "
				   "match case-insensitively: keep one of them", where(key.mark, section),
				   canonical, seen->mark.line + 1, seen->mark.column + 1,
				   seen->spelling == key.text ? ""
							      : fmt::format(" (as {})", shown(seen->spelling))));
	seen = SeenKey{std::string(key.text), key.mark};
	if (key.text != canonical)
		loaded_.warnings.push_back(fmt::format("{}{}: read as \"{}\"; please spell it exactly so",
						       where(key.mark, section), escaped(key.text),
						       canonical));
	sectionKey_ = *known;
	state_ = State::sectionValue;
}

void ConfigHandler::onSectionValue(SectionKey key, const Value &value)
{
	if (value.kind == Kind::list || value.kind == Kind::mapping)
		refuse(fmt::format("{}*{} is an alias of a collection; aliases of lists and mappings are "
				   "not supported (only of single values): write it here",
				   where(value.mark, sectionKeyText(key)), escaped(value.alias)));
	switch (key) {
	case SectionKey::within:
		if (value.kind != Kind::null)
			refuse(fmt::format("{}{}, got {}", where(value.mark, sectionKeyText(key)),
					   sectionExpectation(key), value.describe()));
		section().within.clear(); // null: none, which finishSection() refuses
		return;
	case SectionKey::routeProtocols:
	case SectionKey::routeInterfaces:
		// null empties the list; a single value is a list of one, as for outputInterface.
		onSectionListStart(key);
		state_ = State::section;
		if (value.kind == Kind::scalar)
			onSectionItem(value);
		return;
	case SectionKey::flannelSubnetEnv: readSectionPath(value, key, section().flannelSubnetEnv); return;
	case SectionKey::cniConfDir: readSectionPath(value, key, section().cniConfDir); return;
	case SectionKey::holdDown: readHoldDown(value); return;
	}
}

void ConfigHandler::onSectionListStart(SectionKey key)
{
	sectionKey_ = key;
	sectionItems_ = 0;
	if (key == SectionKey::within)
		section().within.clear();
	else if (key == SectionKey::routeProtocols)
		section().routeProtocols.clear();
	else
		section().routeInterfaces.clear();
	state_ = State::sectionList;
}

void ConfigHandler::onSectionItem(const Value &item)
{
	const SectionKey key = sectionKey_;
	const size_t index = sectionItems_++;
	const auto here = [&] { return where(item.mark, fmt::format("{}[{}]", sectionKeyText(key), index)); };
	const size_t bound = key == SectionKey::within ? kMaxWithinCIDRs
		: key == SectionKey::routeProtocols   ? kMaxRouteProtocols
						      : kMaxInterfacePatterns;
	if (item.kind != Kind::scalar)
		refuse(fmt::format("{}{}, got {} as an entry", here(), sectionExpectation(key),
				   item.describe()));
	if (index >= bound)
		refuseAndStop(fmt::format("{}more than {} entries, the most this key takes: {}", here(),
					  bound, key == SectionKey::routeInterfaces
							 ? "use wildcards such as \"cali*\""
							 : "merge them into fewer"));
	// The parsers quote their input as it is: give them text that prints as itself.
	if (item.text.size() > kMaxValueBytes || !printsVerbatim(item.text))
		refuse(fmt::format("{}{}, got {}", here(), sectionExpectation(key), shown(item.text)));
	const Origin origin{0, static_cast<uint32_t>(item.mark.line + 1)};
	switch (key) {
	case SectionKey::within: {
		auto prefix = parsePrefix(item.text);
		if (!prefix)
			throw Refusal{prefix.error().withContext(here())};
		if (prefix->network.family == Family::ipv6 && !flags_.enableIpv6)
			refuse(fmt::format("{}{} is an IPv6 CIDR but IPv6 is not enabled: start the agent "
					   "with --enable-ipv6, or remove this entry", here(), shown(item.text)));
		prefix->spelling.clear(); // as for the other lists: messages are made here
		prefix->origin = origin;
		section().within.push_back(std::move(*prefix));
		break;
	}
	case SectionKey::routeProtocols: {
		auto protocol = parseRouteProtocol(item.text);
		if (!protocol)
			throw Refusal{protocol.error().withContext(here())};
		section().routeProtocols.push_back(*protocol);
		break;
	}
	default: {
		auto pattern = parseInterfacePattern(item.text);
		if (!pattern)
			throw Refusal{pattern.error().withContext(here())};
		pattern->origin = origin;
		section().routeInterfaces.push_back(std::move(*pattern));
		break;
	}
	}
}

void ConfigHandler::readSectionPath(const Value &value, SectionKey key, std::optional<DiscoveryPath> &out)
{
	if (value.kind == Kind::null) {
		out.reset();
		return;
	}
	if (value.kind != Kind::scalar)
		refuse(fmt::format("{}{}, got {}", where(value.mark, sectionKeyText(key)),
				   sectionExpectation(key), value.describe()));
	if (const auto problem = discoveryPathProblem(value.text))
		refuse(fmt::format("{}{} {}: write an absolute path such as {}",
				   where(value.mark, sectionKeyText(key)), shown(value.text), *problem,
				   key == SectionKey::cniConfDir ? "\"/etc/cni/net.d\""
								 : "\"/run/flannel/subnet.env\""));
	out = DiscoveryPath{std::string(value.text), Origin{0, static_cast<uint32_t>(value.mark.line + 1)}};
}

void ConfigHandler::readHoldDown(const Value &value)
{
	const std::string key = sectionKeyText(SectionKey::holdDown);
	const std::optional<Duration> duration =
		durationOf(value, key, sectionExpectation(SectionKey::holdDown));
	if (!duration)
		return;
	if (*duration < Duration::zero() || *duration > kMaxHoldDown)
		refuse(fmt::format("{}{} is out of range: use a duration from \"0s\" (a withdrawn range "
				   "leaves at once) to \"{}\"", where(value.mark, key), shown(value.text),
				   formatGoDuration(kMaxHoldDown)));
	section().holdDown = *duration;
	loaded_.holdDownGiven = true;
}

// A section must say within which prefixes discovery may add ranges.
Status ConfigHandler::finishSection()
{
	if (!loaded_.config.nonMasqueradeDiscovery)
		return {};
	const NonMasqueradeDiscovery &discovery = section();
	const auto &key = seenKeys_[static_cast<size_t>(Key::nonMasqueradeDiscovery)];
	const std::string here = where(key ? key->mark : sectionMark_, keyName(Key::nonMasqueradeDiscovery));
	if (discovery.within.empty())
		return fail(fmt::format("{}within is required: list the CIDRs of the pod network, such as "
					"within: [\"10.244.0.0/16\"]; a discovered prefix outside them is "
					"ignored (a BGP peer may announce service or load-balancer prefixes)",
					here));
	if (!discovery.followsRoutes() && !discovery.flannelSubnetEnv && !discovery.cniConfDir)
		loaded_.warnings.push_back(fmt::format(
			"{}names no source (routeProtocols, routeInterfaces, flannelSubnetEnv, "
			"cniConfDir): nothing is discovered", here));
	return {};
}

// The checks that need the whole file: each list against cidrLimit (which may come after
// it), the section's requirements. Errors are noted with the others; after an error that
// stopped the reading, the file was not read whole, and nothing is checked.
void ConfigHandler::checkWholeFile()
{
	if (stopped_)
		return;
	const Config &config = loaded_.config;
	const size_t limit = static_cast<size_t>(config.cidrLimit);
	// Upstream's guard against really bad mistakes applies to the defaults too.
	if (!lists_[static_cast<size_t>(ListId::nonMasquerade)].seen &&
	    config.nonMasqueradeCIDRs.size() > limit)
		noteError(Error(fmt::format("{}: nonMasqueradeCIDRs: {} entries (the defaults), more "
					    "than cidrLimit ({}; link-local is not counted). Remove "
					    "entries, or raise cidrLimit in the same file",
					    escaped(source_), config.nonMasqueradeCIDRs.size(), limit)));
	for (size_t i = 0; i < kCidrLists; i++)
		try {
			checkListAgainstLimit(static_cast<ListId>(i));
		} catch (Refusal &refusal) {
			noteError(std::move(refusal.error));
		}
	// A section whose entries were refused would only be said to lack them.
	if (errorCount_ == 0)
		if (Status section = finishSection(); !section)
			noteError(section.error());
}

Result<LoadedConfig> ConfigHandler::finish()
{
	checkWholeFile();
	if (errorCount_ > 0)
		return fail(errorsMessage());
	Config &config = loaded_.config;
	for (size_t i = 0; i < kCidrLists; i++) {
		const auto id = static_cast<ListId>(i);
		CidrList &list = lists_[i];
		if (!list.seen)
			continue;
		std::vector<Prefix> &out = id == ListId::nonMasquerade ? config.nonMasqueradeCIDRs
					   : id == ListId::masquerade	? config.masqueradeCIDRs
									: config.masqueradeSourceCIDRs;
		// The model, allocated once at its exact size.
		out.clear();
		out.reserve(list.staged.size());
		for (const StagedPrefix &staged : list.staged)
			out.push_back(staged.toPrefix());
		std::deque<StagedPrefix>().swap(list.staged);
	}
	config.nonMasqueradeCIDRsGiven = lists_[static_cast<size_t>(ListId::nonMasquerade)].seen;
	// Origin::file 0 of every entry: this file.
	config.files = {source_};
	return std::move(loaded_);
}

enum class Scanner { plainFirst, yamlCppOnly };

// The first tab in the indentation of a line up to `last` (0-based), as a mark: what
// yaml-cpp reports as "illegal block entry" or "illegal map value" without naming it.
// Only asked after a syntax error: in flow style (JSON), a tab before a value is allowed.
std::optional<YAML::Mark> tabInIndentation(std::string_view text, int last)
{
	YAML::Mark at;
	bool indentation = true; // before the line's first other character
	for (const char c : text) {
		if (at.line > std::max(last, 0))
			break;
		if (c == '\t' && indentation)
			return at;
		if (c == '\n') {
			at.line++;
			at.column = 0;
			indentation = true;
			continue;
		}
		indentation = indentation && c == ' ';
		at.column++;
	}
	return std::nullopt;
}

Result<LoadedConfig> parseText(std::string_view text, const std::string &source, const ConfigFlags &flags,
			       Scanner scanner)
{
	ConfigHandler handler(source, flags);
	TextStreamBuf buffer(text);
	std::istream stream(&buffer);
	// yaml-cpp's messages may hold the text of an anchor or tag: escape them like values.
	const auto syntaxError = [&](const YAML::Mark &mark, const std::string &what) {
		if (const auto tab = tabInIndentation(text, mark.line))
			return fail(fmt::format("{}:{}:{}: a tab in the indentation: YAML indents with "
						"spaces only: replace the tab with spaces (the YAML parser "
						"stopped at {}:{}: {})", escaped(source), tab->line + 1,
						tab->column + 1, mark.line + 1, mark.column + 1, escaped(what)));
		return fail(fmt::format("{}:{}:{}: YAML syntax error: {} (the file must be YAML or JSON "
					"with keys such as nonMasqueradeCIDRs)",
					escaped(source), mark.line + 1, mark.column + 1, escaped(what)));
	};
	try {
		// The common case, fast (plain_yaml.h); yaml-cpp reads everything else.
		if (scanner == Scanner::plainFirst && scanPlainYaml(text, handler))
			return handler.finish();
		YAML::Parser parser(stream);
		// A second document is refused in OnDocumentStart, as soon as it starts.
		while (parser.HandleNextDocument(handler)) {
		}
	} catch (const StopParsing &stop) {
		return fail(handler.stoppedBy(stop.error));
	} catch (const YAML::DeepRecursion &e) {
		// yaml-cpp's own guard, for nesting where the handler does not count (a key, or
		// after a refusal): its message is only "bad file".
		return fail(fmt::format("{}:{}:{}: nested {} levels deep or more, more than the YAML "
					"parser takes; an ip-masq-agent config is one mapping with one "
					"list in it: check the brackets and the indentation",
					escaped(source), e.mark.line + 1, e.mark.column + 1, e.depth()));
	} catch (const YAML::ParserException &e) {
		return syntaxError(e.mark, e.msg);
	} catch (const YAML::Exception &e) {
		return syntaxError(e.mark, e.msg);
	}
	return handler.finish();
}

} // namespace

namespace {

// The edit distance of two keys, ignoring case: insertions, deletions, substitutions and
// swaps of two adjacent letters (optimal string alignment). Both are short: the caller
// bounds them.
size_t keyDistance(std::string_view a, std::string_view b)
{
	const std::string x = lower(a), y = lower(b);
	std::vector<std::vector<size_t>> d(x.size() + 1, std::vector<size_t>(y.size() + 1));
	for (size_t i = 0; i <= x.size(); i++)
		d[i][0] = i;
	for (size_t j = 0; j <= y.size(); j++)
		d[0][j] = j;
	for (size_t i = 1; i <= x.size(); i++)
		for (size_t j = 1; j <= y.size(); j++) {
			const size_t substitution = x[i - 1] == y[j - 1] ? 0 : 1;
			d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + substitution});
			if (i > 1 && j > 1 && x[i - 1] == y[j - 2] && x[i - 2] == y[j - 1])
				d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
		}
	return d[x.size()][y.size()];
}

// Longer than any known key by more than the distance allowed: no suggestion, and no cost.
constexpr size_t kLongestSuggested = 32;

} // namespace

std::optional<std::string_view> suggestKey(std::string_view spelling, bool section)
{
	if (spelling.size() > kLongestSuggested)
		return std::nullopt;
	std::optional<std::string_view> best;
	size_t bestDistance = kMaxSuggestionDistance + 1;
	const auto consider = [&](const auto &names) {
		for (const char *name : names)
			if (const size_t distance = keyDistance(spelling, name); distance < bestDistance) {
				best = name;
				bestDistance = distance;
			}
	};
	if (section)
		consider(kSectionKeyNames);
	else
		consider(kKeyNames);
	// "ab" is two edits from any two-letter key: a guess that far is no help.
	if (!best || 2 * bestDistance >= spelling.size())
		return std::nullopt;
	return best;
}

std::vector<Prefix> defaultNonMasqueradeCIDRs(const ConfigFlags &flags)
{
	std::vector<Prefix> out;
	for (const char *text : kRfc1918)
		out.push_back(builtinPrefix(text));
	if (flags.nomasqAllReservedRanges)
		for (const char *text : kOtherReserved)
			out.push_back(builtinPrefix(text));
	return out;
}

Config defaultConfig(const ConfigFlags &flags)
{
	Config config;
	config.nonMasqueradeCIDRs = defaultNonMasqueradeCIDRs(flags);
	return config;
}

Result<LoadedConfig> parseConfig(std::string_view text, const std::string &source,
				 const ConfigFlags &flags)
{
	return parseText(text, source, flags, Scanner::plainFirst);
}

Result<LoadedConfig> parseConfigWithYamlCpp(std::string_view text, const std::string &source,
					    const ConfigFlags &flags)
{
	return parseText(text, source, flags, Scanner::yamlCppOnly);
}

namespace {

tl::unexpected<Error> notRegular(const std::string &path, mode_t mode)
{
	if (S_ISDIR(mode))
		return fail(fmt::format("{}: is a directory; --config must name the file itself "
					"(for a ConfigMap volume, the key's file inside it)", escaped(path)),
			    EISDIR);
	return fail(fmt::format("{}: is {}, not a regular file (symlinks followed); --config must "
				"name a regular file, such as the key's file in a ConfigMap volume",
				escaped(path), fileKindName(mode)),
		    EINVAL);
}

tl::unexpected<Error> tooLarge(const std::string &path, const std::string &size)
{
	return fail(fmt::format("{}: the file is {}, more than the {} MiB ({} bytes) a config file "
				"may have; check that --config names the agent's config, and shorten the "
				"list: adjacent and overlapping CIDRs can be merged into fewer",
				escaped(path), size, kMaxConfigFileBytes / (1024 * 1024), kMaxConfigFileBytes),
		    EFBIG);
}

} // namespace

Result<std::optional<std::string>> readConfigText(const std::string &path)
{
	FileRead read = readBoundedFile(path, kMaxConfigFileBytes);
	switch (read.outcome) {
	case FileRead::Outcome::text: return std::optional<std::string>(std::move(read.text));
	case FileRead::Outcome::absent: return std::optional<std::string>();
	case FileRead::Outcome::notRegular: return notRegular(path, read.mode);
	case FileRead::Outcome::tooLarge:
		return tooLarge(path, read.size < 0 ? "growing while it is read and now larger than that"
						    : fmt::format("{} bytes", read.size));
	case FileRead::Outcome::failed: break;
	}
	return fail(fmt::format("{}: cannot read the config file: {}", escaped(path),
				std::strerror(read.errnum)),
		    read.errnum);
}

namespace {

// "[a,b,c]", or for a long list "[a,...,h,... (N entries)]": one log line whatever its size.
// Only the entries `counted` takes, without a copy of the list.
template<typename Counted>
std::string summarizeList(const std::vector<Prefix> &list, const Counted &counted)
{
	const size_t total = static_cast<size_t>(std::count_if(list.begin(), list.end(), counted));
	const size_t listed = total <= kDescribedInFull ? total : kDescribedFirst;
	std::string cidrs;
	size_t i = 0;
	for (auto it = list.begin(); it != list.end() && i < listed; ++it) {
		if (!counted(*it))
			continue;
		if (i++ > 0)
			cidrs += ',';
		cidrs += it->toString();
	}
	if (listed < total)
		cidrs += fmt::format(",... ({} entries)", total);
	return "[" + cidrs + "]";
}

std::string summarizeList(const std::vector<Prefix> &list)
{
	return summarizeList(list, [](const Prefix &) { return true; });
}

} // namespace

std::string describeConfig(const Config &config)
{
	// The operator's list as written (or the defaults); the pod network's ranges, which
	// putDiscovered adds to it, apart after the section that finds them.
	const auto discovered = [](const Prefix &prefix) { return prefix.origin.discovered(); };
	const auto written = [](const Prefix &prefix) { return !prefix.origin.discovered(); };
	std::string out = fmt::format("nonMasqueradeCIDRs={} ", summarizeList(config.nonMasqueradeCIDRs, written));
	// The newer lists only when used, so that a config without them logs as before.
	if (!config.masqueradeCIDRs.empty())
		out += fmt::format("masqueradeCIDRs={} ", summarizeList(config.masqueradeCIDRs));
	if (!config.masqueradeSourceCIDRs.empty())
		out += fmt::format("masqueradeSourceCIDRs={} ",
				   summarizeList(config.masqueradeSourceCIDRs));
	// The egress keys only when used, for the same reason.
	for (const Family family : {Family::ipv4, Family::ipv6})
		if (const auto &address = config.outputAddressOf(family))
			out += fmt::format("{}={} ", outputAddressKey(family), address->toString());
	const auto names = [](const std::vector<InterfacePattern> &list) {
		std::vector<std::string> out;
		for (const InterfacePattern &pattern : list)
			out.push_back(escaped(pattern.toString()));
		return fmt::format("[{}]", fmt::join(out, ","));
	};
	if (!config.outputInterfaces.empty())
		out += fmt::format("outputInterface={} ", names(config.outputInterfaces));
	if (!config.nonMasqueradeInterfaces.empty())
		out += fmt::format("nonMasqueradeInterfaces={} ", names(config.nonMasqueradeInterfaces));
	if (config.nonMasqueradeDiscovery)
		out += fmt::format("nonMasqueradeDiscovery={{{}}} discovered={} ",
				   describeDiscovery(*config.nonMasqueradeDiscovery),
				   summarizeList(config.nonMasqueradeCIDRs, discovered));
	return out + fmt::format("cidrLimit={} masqLinkLocal={} masqLinkLocalIPv6={} resyncInterval={}",
				 config.cidrLimit, config.masqLinkLocal, config.masqLinkLocalIPv6,
				 formatGoDuration(config.resyncInterval));
}

} // namespace ipmasq
