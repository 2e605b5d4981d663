// SPDX-License-Identifier: Apache-2.0
// The config's keys as tables, and a reader for each kind of value: how it is checked, with
// upstream's semantics and errors that name file, line, key, value and fix, and where it goes.
#include "ip-masq-agent/config/config_keys.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <deque>
#include <type_traits>

#include <fmt/format.h>

#include "ip-masq-agent/base/ascii.h"

namespace ipmasq {
namespace config_keys {

namespace {

// CIDRs and durations longer than this are refused before they are parsed: the longest
// CIDR is 49 bytes, and the parsers below would quote the whole text into their message.
constexpr size_t kMaxValueBytes = 100;

using ascii::isDigit;

std::string lower(std::string_view s)
{
	std::string out(s);
	for (char &c : out)
		if (ascii::isUpper(c))
			c = static_cast<char>(c - 'A' + 'a');
	return out;
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

Origin originOf(const YAML::Mark &mark) { return Origin{0, static_cast<uint32_t>(mark.line + 1)}; }

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

constexpr const char *kCidrs = "expected a list of CIDR strings such as [\"10.0.0.0/8\"]";
constexpr const char *kCidr = "expected a CIDR string such as \"10.0.0.0/8\"";
constexpr const char *kCidrsTooMany = " entries, the most the agent takes whatever cidrLimit "
				      "says. Merge adjacent CIDRs into shorter prefixes";
constexpr const char *kNames = "expected a list of interface names such as [\"eth0\", \"vlan*\"]";
constexpr const char *kName = "expected an interface name such as \"eth0\"";
constexpr const char *kNamesTooMany = " names; list the interfaces with wildcards such as \"eth*\"";
constexpr const char *kPath = "expected an absolute path such as \"/run/flannel/subnet.env\"";
constexpr const char *kMergeThem = " entries, the most this key takes: merge them into fewer";

// The nonMasqueradeDiscovery section (discovery_config.h).
constexpr KeySpec kDiscoveryKeys[] = {
	{.name = "within", .slot = &NonMasqueradeDiscovery::within,
	 .expected = "expected a list of CIDR strings such as [\"10.244.0.0/16\"]",
	 .most = kMaxWithinCIDRs, .tooMany = kMergeThem},
	{.name = "routeProtocols", .slot = &NonMasqueradeDiscovery::routeProtocols,
	 .expected = "expected a list of route protocols such as [bird] or [\"186\"]",
	 .most = kMaxRouteProtocols, .tooMany = kMergeThem},
	{.name = "routeInterfaces", .slot = &NonMasqueradeDiscovery::routeInterfaces,
	 .expected = "expected a list of interface names such as [\"flannel.1\", \"cali*\"]",
	 .most = kMaxInterfacePatterns,
	 .tooMany = " entries, the most this key takes: use wildcards such as \"cali*\""},
	{.name = "flannelSubnetEnv", .slot = &NonMasqueradeDiscovery::flannelSubnetEnv, .expected = kPath},
	{.name = "cniConfDir", .slot = &NonMasqueradeDiscovery::cniConfDir, .expected = kPath},
	{.name = "holdDown", .slot = &NonMasqueradeDiscovery::holdDown,
	 .expected = "expected a duration string such as \"30s\"", .least = Duration::zero(),
	 .longest = kMaxHoldDown, .given = &LoadedConfig::holdDownGiven},
};
} // namespace

constexpr Table kDiscoveryTable{kDiscoveryKeys, "nonMasqueradeDiscovery"};

namespace {
// The snatGuard section (snat_guard.h).
constexpr const char *kLimit = "expected a whole number from 1 to 1000000 such as 100";
constexpr KeySpec kSnatGuardKeys[] = {
	{.name = "mode", .slot = &SnatGuard::mode, .expected = "expected observe or enforce"},
	{.name = "newConnectionsPerSecond", .slot = &SnatGuard::newConnectionsPerSecond, .expected = kLimit,
	 .most = kMaxSnatGuardLimit},
	{.name = "openConnections", .slot = &SnatGuard::openConnections, .expected = kLimit,
	 .most = kMaxSnatGuardLimit},
	{.name = "exempt", .slot = &SnatGuard::exempt,
	 .expected = "expected a list of CIDR strings such as [\"198.18.0.0/24\"]", .most = kMaxSnatGuardExempt,
	 .tooMany = " entries, the most this key takes: exempt prefixes, not single pods"},
};
} // namespace

constexpr Table kSnatGuardTable{kSnatGuardKeys, "snatGuard"};

namespace {

// The config's keys: upstream's, then the agent's own.
constexpr KeySpec kKeys[] = {
	{.name = "nonMasqueradeCIDRs", .slot = &Config::nonMasqueradeCIDRs, .expected = kCidrs,
	 .most = kMaxNonMasqueradeCIDRs, .tooMany = kCidrsTooMany, .entry = kCidr,
	 .aliasOf = "a list", .aliasFix = "the list"},
	{.name = "cidrLimit", .slot = &Config::cidrLimit, .expected = "expected a whole number such as 64",
	 .most = kMaxCidrLimit, .given = &LoadedConfig::cidrLimitGiven},
	{.name = "masqLinkLocal", .slot = &Config::masqLinkLocal, .expected = "expected true or false"},
	{.name = "masqLinkLocalIPv6", .slot = &Config::masqLinkLocalIPv6, .expected = "expected true or false"},
	{.name = "resyncInterval", .slot = &Config::resyncInterval,
	 .expected = "expected a duration string such as \"60s\"", .least = kMinResyncInterval,
	 .given = &LoadedConfig::resyncIntervalGiven},
	{.name = "masqueradeCIDRs", .slot = &Config::masqueradeCIDRs, .expected = kCidrs,
	 .most = kMaxNonMasqueradeCIDRs, .tooMany = kCidrsTooMany, .entry = kCidr,
	 .aliasOf = "a list", .aliasFix = "the list"},
	{.name = "masqueradeSourceCIDRs", .slot = &Config::masqueradeSourceCIDRs, .expected = kCidrs,
	 .most = kMaxNonMasqueradeCIDRs, .tooMany = kCidrsTooMany, .entry = kCidr,
	 .aliasOf = "a list", .aliasFix = "the list"},
	{.name = "outputAddress", .slot = &Config::outputAddress,
	 .expected = "expected an IPv4 address, range or CIDR such as \"203.0.113.7\", "
		     "\"203.0.113.7-203.0.113.9\" or \"203.0.113.0/24\""},
	{.name = "outputAddressIPv6", .slot = &Config::outputAddressIPv6,
	 .expected = "expected an IPv6 address, range or CIDR such as \"2001:db8::7\""},
	{.name = "outputInterface", .slot = &Config::outputInterfaces, .expected = kNames,
	 .most = kMaxInterfacePatterns, .tooMany = kNamesTooMany, .entry = kName,
	 .aliasOf = "a collection", .aliasFix = "the names"},
	{.name = "nonMasqueradeInterfaces", .slot = &Config::nonMasqueradeInterfaces, .expected = kNames,
	 .most = kMaxInterfacePatterns, .tooMany = kNamesTooMany, .entry = kName,
	 .aliasOf = "a collection", .aliasFix = "the names"},
	{.name = "nonMasqueradeDiscovery", .slot = &Config::nonMasqueradeDiscovery,
	 .expected = "expected a mapping such as {within: [\"10.244.0.0/16\"], routeProtocols: [bird]}",
	 .aliasOf = "a mapping", .aliasFix = "the section", .section = &kDiscoveryTable},
	{.name = "snatGuard", .slot = &Config::snatGuard,
	 .expected = "expected a mapping such as {mode: observe, newConnectionsPerSecond: 100}",
	 .aliasOf = "a mapping", .aliasFix = "the section", .section = &kSnatGuardTable},
};
} // namespace

constexpr Table kConfigTable{kKeys, ""};

namespace {

// The staged CIDR lists, in the order their errors are checked.
constexpr std::array kStagedLists{&Config::nonMasqueradeCIDRs, &Config::masqueradeCIDRs,
				  &Config::masqueradeSourceCIDRs};

// One of the CIDR lists of the config, while it is read.
struct CidrList {
	const KeySpec *key = nullptr; // set once the key is in the file (null empties the list)
	YAML::Mark mark = YAML::Mark::null_mark();
	std::deque<StagedPrefix> staged;
	size_t count = 0; // valid entries
	bool limitReported = false; // more than cidrLimit was said once: not again
};

// What cidrLimit says about a list's count: link-local is added to the non-masquerade
// list by the agent and is not counted.
const char *limitNote(const KeySpec &key)
{
	return key.slot == Slot(&Config::nonMasqueradeCIDRs) ? "; link-local is not counted" : "";
}

} // namespace

std::string Value::describe() const
{
	switch (kind) {
	case Kind::null: return "null";
	case Kind::list: return alias.empty() ? "a list" : fmt::format("*{}, an alias of a list", escaped(alias));
	case Kind::mapping:
		return alias.empty() ? "a mapping" : fmt::format("*{}, an alias of a mapping", escaped(alias));
	case Kind::scalar: return fmt::format("{} {}", plain ? "a scalar" : "a quoted string", shown(text));
	}
	return "";
}

std::string at(const std::string &source, const YAML::Mark &mark)
{
	if (mark.is_null())
		return fmt::format("{}: ", escaped(source));
	return fmt::format("{}:{}:{}: ", escaped(source), mark.line + 1, mark.column + 1);
}

std::string where(const std::string &source, const YAML::Mark &mark, std::string_view key)
{
	return fmt::format("{}{}: ", at(source, mark), key);
}

// "cidrLimit", or "nonMasqueradeDiscovery.holdDown": what a message about a key's value names.
std::string keyText(const Table &table, const KeySpec &key)
{
	return table.section.empty() ? std::string(key.name) : fmt::format("{}.{}", table.section, key.name);
}

// The key of `table` that `spelling` is, case-insensitively.
const KeySpec *knownKey(const Table &table, std::string_view spelling)
{
	if (spelling.size() > 32)
		return nullptr;
	const std::string l = lower(spelling);
	for (const KeySpec &key : table.keys)
		if (l == lower(key.name))
			return &key;
	return nullptr;
}

std::string keyNames(const Table &table)
{
	std::vector<const char *> names;
	for (const KeySpec &key : table.keys)
		names.push_back(key.name);
	return fmt::format("{}", fmt::join(names, ", "));
}

// The config and the CIDR lists as they are read, and a reader for each kind of value,
// picked by the type of the key's slot.
struct Values::Model {
	Model(const std::string &source, const ConfigFlags &flags) : source_(source), flags_(flags)
	{
		loaded_.config = defaultConfig(flags);
		loaded_.fromFile = true;
	}

	// A key's value that is one node: a scalar, null or an alias.
	void single(const Read &read)
	{
		std::visit([&](auto member) { take(member, read); }, read.key.slot);
	}

	// A list, or the section, starts as a key's value (collectionOf() says which it takes).
	void open(const KeySpec &key, const YAML::Mark &mark)
	{
		if (const auto *cidrs = std::get_if<std::vector<Prefix> Config::*>(&key.slot)) {
			CidrList &list = listOf(*cidrs);
			list.key = &key;
			list.mark = mark;
		} else if (key.section == &kDiscoveryTable) {
			NonMasqueradeDiscovery discovery;
			discovery.written.origin = originOf(mark);
			loaded_.config.nonMasqueradeDiscovery = std::move(discovery);
		} else if (key.section == &kSnatGuardTable) {
			SnatGuard guard;
			guard.written.origin = originOf(mark);
			loaded_.config.snatGuard = std::move(guard);
		}
	}

	// An entry of a list.
	void item(const Read &entry)
	{
		const KeySpec &key = entry.key;
		const Value &value = entry.value;
		if (value.kind != Kind::scalar)
			refuse(key.entry ? fmt::format("{}{}, got {}", entry(), key.entry, value.describe())
					 : fmt::format("{}{}, got {} as an entry", entry(), key.expected,
						       value.describe()));
		// A list of CIDRs of the config is bounded by its valid entries (add()), the
		// others here.
		const bool staged = std::holds_alternative<std::vector<Prefix> Config::*>(key.slot);
		if (!staged && *entry.index >= key.most)
			refuseAndStop(fmt::format("{}more than {}{}", entry(), key.most, key.tooMany));
		// The parsers quote their input into their messages as it is: give them only
		// short text that prints as itself.
		if (value.text.size() > kMaxValueBytes || !printsVerbatim(value.text)) {
			if (staged)
				refuse(fmt::format("{}CIDR {} could not be parsed: a CIDR is an address, "
						   "\"/\" and a length, such as \"10.0.0.0/8\" or "
						   "\"2001:db8::/32\"", entry(), shown(value.text)));
			if (key.entry)
				refuse(fmt::format("{}{} is not an interface name", entry(), shown(value.text)));
			entry.wrongType(shown(value.text));
		}
		std::visit([&](auto member) { add(member, entry); }, key.slot);
	}

	// An error was noted: no config comes of the file, and the staged lists go now.
	void failed()
	{
		failed_ = true;
		for (CidrList &list : lists_)
			std::deque<StagedPrefix>().swap(list.staged);
	}

	// The checks that need the whole file: each list against cidrLimit (which may come
	// after it), the section's requirements (`sectionKey`: where its key is).
	std::vector<Error> checkWholeFile(const YAML::Mark &discoveryKey, const YAML::Mark &guardKey)
	{
		std::vector<Error> errors;
		const Config &config = loaded_.config;
		// Upstream's guard against really bad mistakes applies to the defaults too.
		if (!lists_[0].key && config.nonMasqueradeCIDRs.size() > static_cast<size_t>(config.cidrLimit))
			errors.emplace_back(fmt::format(
				"{}: nonMasqueradeCIDRs: {} entries (the defaults), more than cidrLimit ({}; "
				"link-local is not counted). Remove entries, or raise cidrLimit in the same file",
				escaped(source_), config.nonMasqueradeCIDRs.size(), config.cidrLimit));
		for (CidrList &list : lists_)
			try {
				checkAgainstLimit(list);
			} catch (Refusal &refusal) {
				errors.push_back(std::move(refusal.error));
			}
		// A section whose entries were refused would only be said to lack them.
		if (!failed_ && errors.empty())
			if (Status section = finishSection(discoveryKey); !section)
				errors.push_back(section.error());
		if (!failed_ && loaded_.config.snatGuard)
			if (Status guard = validateSnatGuard(*loaded_.config.snatGuard,
							     where(source_, guardKey, kSnatGuardTable.section));
			    !guard)
				errors.push_back(guard.error());
		return errors;
	}

	LoadedConfig finish()
	{
		Config &config = loaded_.config;
		for (size_t i = 0; i < lists_.size(); i++) {
			CidrList &list = lists_[i];
			if (!list.key)
				continue;
			// The model, allocated once at its exact size.
			std::vector<Prefix> &out = config.*kStagedLists[i];
			out.clear();
			out.reserve(list.staged.size());
			for (const StagedPrefix &staged : list.staged)
				out.push_back(staged.toPrefix());
			std::deque<StagedPrefix>().swap(list.staged);
		}
		config.nonMasqueradeCIDRsGiven = lists_[0].key != nullptr;
		// Origin::file 0 of every entry: this file.
		config.files = {source_};
		return std::move(loaded_);
	}

	NonMasqueradeDiscovery &section() { return *loaded_.config.nonMasqueradeDiscovery; }
	template<typename Owner>
	Owner &owner()
	{
		if constexpr (std::is_same_v<Owner, Config>)
			return loaded_.config;
		else if constexpr (std::is_same_v<Owner, SnatGuard>)
			return *loaded_.config.snatGuard;
		else
			return section();
	}
	CidrList &listOf(std::vector<Prefix> Config::*member)
	{
		const auto at = std::find(kStagedLists.begin(), kStagedLists.end(), member);
		return lists_[static_cast<size_t>(at - kStagedLists.begin())];
	}

	// cidrLimit bounds each list on its own; a list over it is said once.
	void checkAgainstLimit(CidrList &list)
	{
		const int limit = loaded_.config.cidrLimit;
		if (list.count > static_cast<size_t>(limit) && !list.limitReported) {
			list.limitReported = true;
			refuse(fmt::format("{}{} entries, more than cidrLimit ({}{}). Remove entries, or "
					   "raise cidrLimit in the same file", where(source_, list.mark, list.key->name),
					   list.count, limit, limitNote(*list.key)));
		}
	}

	// A section must say within which prefixes discovery may add ranges.
	Status finishSection(const YAML::Mark &key)
	{
		if (!loaded_.config.nonMasqueradeDiscovery)
			return {};
		const NonMasqueradeDiscovery &discovery = section();
		const std::string here = where(source_, key, kDiscoveryTable.section);
		if (discovery.within.empty())
			return fail(fmt::format("{}within is required: list the CIDRs of the pod network, "
						"such as within: [\"10.244.0.0/16\"]; a discovered prefix "
						"outside them is ignored (a BGP peer may announce service or "
						"load-balancer prefixes)", here));
		if (!discovery.followsRoutes() && !discovery.flannelSubnetEnv && !discovery.cniConfDir)
			loaded_.warnings.push_back(fmt::format(
				"{}names no source (routeProtocols, routeInterfaces, flannelSubnetEnv, "
				"cniConfDir): nothing is discovered", here));
		return {};
	}

	// The lists. CIDRs take null (empty) and lists only; the others take a single value
	// too, as a list of one (as upstream's PR #103 for the interfaces).
	template<typename Owner>
	void take(std::vector<Prefix> Owner::*, const Read &read)
	{
		if (read.value.kind != Kind::null)
			read.wrongType();
		open(read.key, read.value.mark); // an explicit null empties the list, as in upstream
	}
	template<typename Owner, typename Entry>
	void take(std::vector<Entry> Owner::*, const Read &read)
	{
		if (read.value.kind == Kind::scalar)
			item(Read{read.source, read.table, read.key, read.value, 0});
	}

	Prefix cidrOf(const Read &entry) const
	{
		auto prefix = parsePrefix(entry.value.text);
		if (!prefix)
			throw Refusal{prefix.error().withContext(entry())};
		if (prefix->network.family == Family::ipv6 && !flags_.enableIpv6)
			refuse(fmt::format("{}{} is an IPv6 CIDR but IPv6 is not enabled: start the agent "
					   "with --enable-ipv6, or remove this entry", entry(),
					   shown(entry.value.text)));
		return std::move(*prefix);
	}
	void add(std::vector<Prefix> Config::*member, const Read &entry)
	{
		const Prefix prefix = cidrOf(entry);
		CidrList &list = listOf(member);
		const size_t count = ++list.count;
		const int limit = loaded_.config.cidrLimit;
		// Stop as soon as the list is too long: past the hard maximum, or past cidrLimit
		// when that came first (it is final then; else it may still come, and is checked
		// then).
		if (count > entry.key.most)
			refuseAndStop(fmt::format("{}more than {}{}", entry(), entry.key.most, entry.key.tooMany));
		if (cidrLimitFinal_ && count > static_cast<size_t>(limit) && !list.limitReported) {
			list.limitReported = true;
			refuse(fmt::format("{}{} entries or more, more than cidrLimit ({}{}). Remove "
					   "entries, or raise cidrLimit in the same file", entry(), count,
					   limit, limitNote(entry.key)));
		}
		if (!failed_) // else no config comes of the file: nothing to keep
			list.staged.push_back(StagedPrefix::of(prefix, originOf(entry.value.mark).line));
	}
	void add(std::vector<Prefix> NonMasqueradeDiscovery::*member, const Read &entry)
	{
		Prefix prefix = cidrOf(entry);
		prefix.spelling.clear(); // as for the other lists: messages are made here
		prefix.origin = originOf(entry.value.mark);
		(section().*member).push_back(std::move(prefix));
	}
	void add(std::vector<Prefix> SnatGuard::*member, const Read &entry)
	{
		Prefix prefix = cidrOf(entry);
		prefix.spelling.clear();
		prefix.origin = originOf(entry.value.mark);
		(owner<SnatGuard>().*member).push_back(std::move(prefix));
	}
	void add(std::vector<RouteProtocol> NonMasqueradeDiscovery::*member, const Read &entry)
	{
		auto protocol = parseRouteProtocol(entry.value.text);
		if (!protocol)
			throw Refusal{protocol.error().withContext(entry())};
		(section().*member).push_back(*protocol);
	}
	template<typename Owner>
	void add(std::vector<InterfacePattern> Owner::*member, const Read &entry)
	{
		auto pattern = parseInterfacePattern(entry.value.text);
		if (!pattern)
			throw Refusal{pattern.error().withContext(entry())};
		pattern->origin = originOf(entry.value.mark);
		(owner<Owner>().*member).push_back(std::move(*pattern));
	}
	template<typename Member>
	void add(Member, const Read &) {} // not a list: never called

	// A whole number of at most the key's `most`, or nullopt past it; anything else is the
	// wrong type. Go's JSON decoder (which upstream feeds YAML through) treats a quoted
	// scalar as a string: `cidrLimit: "64"` fails there, so it fails here too.
	static std::optional<uint64_t> boundedNumber(const Read &read)
	{
		const Value &value = read.value;
		uint64_t number = 0;
		const IntegerParse parsed = value.kind == Kind::scalar
			? parseBoundedInteger(value.text, read.key.most, number)
			: IntegerParse::notAnInteger;
		if (parsed == IntegerParse::notAnInteger || !value.plain)
			read.wrongType(value.describe() +
				       (parsed == IntegerParse::notAnInteger ? "" : " (write it without quotes)"));
		if (parsed == IntegerParse::outOfRange)
			return std::nullopt;
		return number;
	}

	// cidrLimit: null keeps the default, as Go's decoder does.
	void take(int Config::*member, const Read &read)
	{
		const Value &value = read.value;
		if (value.kind != Kind::null) {
			const std::optional<uint64_t> number = boundedNumber(read);
			if (!number)
				refuse(fmt::format("{}{} is out of range: use a number from 0 to {}", read(),
						   shown(value.text), read.key.most));
			loaded_.config.*member = static_cast<int>(*number);
		}
		loaded_.*read.key.given = value.kind != Kind::null;
		cidrLimitFinal_ = true;
		// A list before cidrLimit was only checked against the hard maximum.
		for (CidrList &list : lists_)
			checkAgainstLimit(list);
	}

	void take(bool Config::*member, const Read &read)
	{
		const Value &value = read.value;
		if (value.kind == Kind::null)
			return;
		const std::optional<bool> parsed =
			value.kind == Kind::scalar ? parseYamlBool(value.text) : std::nullopt;
		if (!parsed || !value.plain)
			read.wrongType(value.describe() + (parsed ? " (write it without quotes)" : ""));
		loaded_.config.*member = *parsed;
	}

	// A duration: null gives nullopt (the default holds); anything but a Go duration with
	// a unit is refused.
	std::optional<Duration> durationOf(const Read &read) const
	{
		const Value &value = read.value;
		if (value.kind == Kind::null)
			return std::nullopt;
		if (value.kind != Kind::scalar)
			read.wrongType();
		const std::string_view text = value.text;
		if (value.plain && isBareNumber(text))
			refuse(fmt::format("{}{} is a bare number; like upstream, the agent needs a "
					   "duration with a unit: {}", read(), shown(text),
					   text.size() <= kShownBytes
						   ? fmt::format("write \"{}s\" for {} seconds", text, text)
						   : std::string("write the seconds followed by \"s\", such as \"60s\"")));
		// parseGoDuration quotes its input into its messages as it is (see item()): give
		// it only short text, and use its message only if the text prints as itself.
		const auto notADuration = [&] {
			refuse(fmt::format("{}{} is not a duration (write e.g. \"60s\", \"1m30s\", "
					   "\"1.5h\" or \"300ms\")", read(), shown(text)));
		};
		if (text.size() > kMaxValueBytes)
			notADuration();
		auto duration = parseGoDuration(text);
		if (!duration && !printsVerbatim(text))
			notADuration();
		if (!duration)
			throw Refusal{duration.error().withContext(read())};
		return *duration;
	}
	// resyncInterval: below its least, raised to it.
	void take(Duration Config::*member, const Read &read)
	{
		std::optional<Duration> duration = durationOf(read);
		if (!duration)
			return;
		if (*duration < read.key.least) {
			loaded_.warnings.push_back(fmt::format(
				"{}{} is below the minimum; using {} (a shorter interval would only burn "
				"CPU: config changes are picked up at once anyway)", read(),
				shown(read.value.text), formatGoDuration(read.key.least)));
			*duration = read.key.least;
		}
		loaded_.config.*member = *duration;
		loaded_.*read.key.given = true;
	}
	// holdDown: refused outside its range.
	void take(Duration NonMasqueradeDiscovery::*member, const Read &read)
	{
		const std::optional<Duration> duration = durationOf(read);
		if (!duration)
			return;
		if (*duration < read.key.least || *duration > read.key.longest)
			refuse(fmt::format("{}{} is out of range: use a duration from \"{}\" (a withdrawn "
					   "range leaves at once) to \"{}\"", read(), shown(read.value.text),
					   formatGoDuration(read.key.least), formatGoDuration(read.key.longest)));
		section().*member = *duration;
		loaded_.*read.key.given = true;
	}

	void take(std::optional<OutputAddress> Config::*member, const Read &read)
	{
		const Value &value = read.value;
		std::optional<OutputAddress> &out = loaded_.config.*member;
		if (value.kind == Kind::null)
			return out.reset();
		const std::string_view text = value.text;
		// parseOutputAddress quotes its input into its messages as it is (see item()).
		if (value.kind != Kind::scalar || text.size() > kMaxValueBytes || !printsVerbatim(text))
			read.wrongType(value.kind == Kind::scalar ? shown(text) : value.describe());
		auto parsed = parseOutputAddress(text);
		if (!parsed)
			throw Refusal{parsed.error().withContext(read())};
		const Family family = member == &Config::outputAddress ? Family::ipv4 : Family::ipv6;
		if (parsed->family() != family)
			refuse(fmt::format("{}{} is an {} {}; {} takes {} only: write it in {}", read(),
					   shown(text), familyName(parsed->family()),
					   parsed->form == OutputAddress::Form::subnet ? "CIDR" : "address",
					   read.key.name, familyName(family), outputAddressKey(parsed->family())));
		if (family == Family::ipv6 && !flags_.enableIpv6)
			refuse(fmt::format("{}IPv6 is not enabled: start the agent with --enable-ipv6, or "
					   "remove this key", read()));
		parsed->origin = originOf(value.mark);
		out = std::move(*parsed);
	}

	// The section as one value: null is no section, as if the key were absent (all its
	// keys commented out); anything else is the wrong type.
	void take(std::optional<NonMasqueradeDiscovery> Config::*, const Read &read)
	{
		if (read.value.kind != Kind::null)
			read.wrongType();
	}

	void take(std::optional<SnatGuard> Config::*, const Read &read)
	{
		if (read.value.kind != Kind::null)
			read.wrongType();
	}

	void take(std::optional<SnatGuardMode> SnatGuard::*member, const Read &read)
	{
		const Value &value = read.value;
		if (value.kind == Kind::null)
			return (owner<SnatGuard>().*member).reset();
		if (value.kind != Kind::scalar)
			read.wrongType();
		auto mode = parseSnatGuardMode(value.text);
		if (!mode)
			throw Refusal{mode.error().withContext(read())};
		owner<SnatGuard>().*member = *mode;
	}

	// A limit: a whole number, unquoted, from 1 to the key's most; null: no such limit.
	void take(std::optional<uint32_t> SnatGuard::*member, const Read &read)
	{
		const Value &value = read.value;
		std::optional<uint32_t> &out = owner<SnatGuard>().*member;
		if (value.kind == Kind::null)
			return out.reset();
		const std::optional<uint64_t> number = boundedNumber(read);
		if (!number || *number == 0)
			refuse(fmt::format("{}{} is out of range: give a whole number from 1 to {} (per source "
					   "address toward one destination), or leave the key out for no such "
					   "limit", read(), shown(value.text), read.key.most));
		out = static_cast<uint32_t>(*number);
	}

	void take(std::optional<DiscoveryPath> NonMasqueradeDiscovery::*member, const Read &read)
	{
		const Value &value = read.value;
		std::optional<DiscoveryPath> &out = section().*member;
		if (value.kind == Kind::null)
			return out.reset();
		if (value.kind != Kind::scalar)
			read.wrongType();
		if (const auto problem = discoveryPathProblem(value.text))
			refuse(fmt::format("{}{} {}: write an absolute path such as {}", read(),
					   shown(value.text), *problem,
					   member == &NonMasqueradeDiscovery::cniConfDir ? "\"/etc/cni/net.d\""
											 : "\"/run/flannel/subnet.env\""));
		out = DiscoveryPath{std::string(value.text), originOf(value.mark)};
	}

	const std::string &source_;
	const ConfigFlags &flags_;
	LoadedConfig loaded_;
	bool failed_ = false;
	std::array<CidrList, kStagedLists.size()> lists_;
	bool cidrLimitFinal_ = false; // the cidrLimit key was read: the limit cannot change
};

Values::Values(const std::string &source, const ConfigFlags &flags)
	: model_(std::make_unique<Model>(source, flags))
{
}
Values::~Values() = default;
void Values::single(const Read &read) { model_->single(read); }
void Values::open(const KeySpec &key, const YAML::Mark &mark) { model_->open(key, mark); }
void Values::item(const Read &entry) { model_->item(entry); }
LoadedConfig &Values::loaded() { return model_->loaded_; }
void Values::failed() { model_->failed(); }
std::vector<Error> Values::checkWholeFile(const YAML::Mark &discoveryKey, const YAML::Mark &guardKey)
{
	return model_->checkWholeFile(discoveryKey, guardKey);
}
LoadedConfig Values::finish() { return model_->finish(); }

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

} // namespace config_keys

using config_keys::kConfigTable;
using config_keys::kDiscoveryTable;

std::optional<std::string_view> suggestKey(std::string_view spelling, bool section)
{
	return config_keys::suggestKeyIn(section ? kDiscoveryTable : kConfigTable, spelling);
}

std::optional<std::string_view> config_keys::suggestKeyIn(const Table &table, std::string_view spelling)
{
	if (spelling.size() > config_keys::kLongestSuggested)
		return std::nullopt;
	std::optional<std::string_view> best;
	size_t bestDistance = kMaxSuggestionDistance + 1;
	for (const config_keys::KeySpec &key : table.keys)
		if (const size_t distance = config_keys::keyDistance(spelling, key.name); distance < bestDistance) {
			best = key.name;
			bestDistance = distance;
		}
	// "ab" is two edits from any two-letter key: a guess that far is no help.
	if (!best || 2 * bestDistance >= spelling.size())
		return std::nullopt;
	return best;
}

} // namespace ipmasq
