// SPDX-License-Identifier: Apache-2.0
// The config's keys as tables (each key's name, what its value must be, its bounds and
// where it goes) and the readers of their values: what config.cpp's event handler drives.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <yaml-cpp/mark.h>

#include "ip-masq-agent/base/error.h"
#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/config/config.h"

namespace ipmasq::config_keys {

// A value quoted into a message is cut after this many bytes (and its length said).
inline constexpr size_t kShownBytes = 64;

// A user's value for a message: escaped, in quotes, and cut short if long.
inline std::string shown(std::string_view text) { return quotedShort(text, kShownBytes); }

enum class Kind { null, scalar, list, mapping };

// One value as the handler sees it. An alias arrives as the value its anchor recorded
// (a scalar's text, or only the kind of a collection): nothing is ever expanded.
struct Value {
	Kind kind = Kind::null;
	std::string_view text; // a scalar's text
	bool plain = true;     // not quoted: Go's decoder reads a quoted scalar as a string
	YAML::Mark mark;
	std::string_view alias; // the anchor's name, when the value is an alias

	// "null", "a list", "*a, an alias of a mapping", "a quoted string \"64\"", ...
	std::string describe() const;
};

// A user error found while parsing, thrown inside the event handler and caught at its
// event boundary, where it is noted: from then on the handler builds nothing, but goes
// on reading to report every other error of the file too (the handler leaves its state
// where the next event is read right: a refused value is skipped whole). A `stops`
// refusal leaves no such state (a complex key, a list past its hard bound): every later
// event is ignored. Either way yaml-cpp finishes the document, so that a syntax error
// further on is what gets reported, alone, as the Node-based parser did (a misparse's
// consequences only confuse). Never leaves the config's parser.
struct Refusal {
	Error error;
	bool stops = false;
};

[[noreturn]] inline void refuse(std::string message) { throw Refusal{Error(std::move(message))}; }
// A refusal after which the handler's state cannot be trusted: nothing more is read.
[[noreturn]] inline void refuseAndStop(std::string message)
{
	throw Refusal{Error(std::move(message)), true};
}

// "file:line:col: ", so that every message points at what to edit ("file: " without a mark).
std::string at(const std::string &source, const YAML::Mark &mark);
// "file:line:col: key: ".
std::string where(const std::string &source, const YAML::Mark &mark, std::string_view key);

// Where a key's value goes, which also says what the value is: the member's type picks
// its reader (config_keys.cpp).
using Slot = std::variant<
	std::vector<Prefix> Config::*,			 // CIDRs, staged until the end of the file
	std::vector<InterfacePattern> Config::*,	 // interface names; one name is a list of one
	int Config::*,					 // cidrLimit
	bool Config::*,					 // true or false
	Duration Config::*,				 // resyncInterval: raised to `least`
	std::optional<OutputAddress> Config::*,		 // outputAddress(IPv6)
	std::optional<NonMasqueradeDiscovery> Config::*, // the section: `section`'s keys
	std::vector<Prefix> NonMasqueradeDiscovery::*,	 // within
	std::vector<RouteProtocol> NonMasqueradeDiscovery::*,
	std::vector<InterfacePattern> NonMasqueradeDiscovery::*,
	std::optional<DiscoveryPath> NonMasqueradeDiscovery::*,
	Duration NonMasqueradeDiscovery::*, // holdDown: refused outside [least, longest]
	std::optional<SnatGuard> Config::*,	 // the section: `section`'s keys
	std::optional<SnatGuardMode> SnatGuard::*, // mode
	std::optional<uint32_t> SnatGuard::*,	 // a limit, from 1 to `most`
	std::vector<Prefix> SnatGuard::*>;	 // exempt

struct Table;

struct KeySpec {
	const char *name;
	Slot slot;
	// What the value must be, for "expected ..., got ..." messages.
	const char *expected;
	// Lists: the most entries taken, and what the refusal past it says after "more than
	// N". cidrLimit: its largest value. Durations: the range taken.
	size_t most = 0;
	const char *tooMany = "";
	Duration least{}, longest = Duration::max();
	// A list of the config: what an entry must be (an entry of the section's lists is
	// refused with `expected`, "as an entry").
	const char *entry = nullptr;
	// The key's value is refused as an alias of a list, a mapping or either ("a list", "a
	// mapping", "a collection"), "write {aliasFix} here"; else, as any wrong value. Keys
	// of the section: as an alias of either, "write it here".
	const char *aliasOf = nullptr, *aliasFix = nullptr;
	// Whether the file gave it (a merge of files takes the largest, or shortest, given).
	bool LoadedConfig::*given = nullptr;
	// The section's keys.
	const Table *section = nullptr;
};

struct Table {
	std::span<const KeySpec> keys;
	// Empty for the config's own keys (upstream's: an unknown one is a warning); else the
	// section's key, which messages about its keys name (an unknown one is an error).
	std::string_view section;
};

// The config's keys (upstream's, then the agent's own), nonMasqueradeDiscovery's and
// snatGuard's.
extern const Table kConfigTable;
extern const Table kDiscoveryTable;
extern const Table kSnatGuardTable;

// The collection a key's value may be written as: a list for the lists, the section's
// mapping; Kind::scalar for the others (single values only).
template<typename Owner, typename Entry>
constexpr Kind collectionOf(std::vector<Entry> Owner::*) { return Kind::list; }
constexpr Kind collectionOf(std::optional<NonMasqueradeDiscovery> Config::*) { return Kind::mapping; }
constexpr Kind collectionOf(std::optional<SnatGuard> Config::*) { return Kind::mapping; }
template<typename Member>
constexpr Kind collectionOf(Member) { return Kind::scalar; }

// "cidrLimit", or "nonMasqueradeDiscovery.holdDown": what a message about a key's value names.
std::string keyText(const Table &table, const KeySpec &key);
// The key of `table` that `spelling` is, case-insensitively, or nullptr.
const KeySpec *knownKey(const Table &table, std::string_view spelling);
// "nonMasqueradeCIDRs, cidrLimit, ...".
std::string keyNames(const Table &table);
// The key of `table` that an unknown `spelling` most likely means (kMaxSuggestionDistance).
std::optional<std::string_view> suggestKeyIn(const Table &table, std::string_view spelling);

// A value read for a key (or as entry `index` of its list), and where it is for messages:
// "file:line:col: key: " or "... key[index]: ", made only when one is (this runs for each
// of up to a million entries).
struct Read {
	const std::string &source;
	const Table &table;
	const KeySpec &key;
	const Value &value;
	std::optional<size_t> index = std::nullopt;

	std::string operator()() const
	{
		const std::string name = keyText(table, key);
		return where(source, value.mark, index ? fmt::format("{}[{}]", name, *index) : name);
	}
	// "expected ..., got ...", with the value's own words for what it is, or `got`.
	[[noreturn]] void wrongType() const { wrongType(value.describe()); }
	[[noreturn]] void wrongType(const std::string &got) const
	{
		refuse(fmt::format("{}{}, got {}", (*this)(), key.expected, got));
	}
};

// Where a file's values go while it is read: each one through the reader of its key's
// kind, into the config, which comes out whole at the end. A reader refuses a bad value
// (throws Refusal) with a message that names the file, line, key, value and fix.
class Values
{
public:
	Values(const std::string &source, const ConfigFlags &flags);
	~Values();

	// A key's value that is one node: a scalar, null or an alias.
	void single(const Read &read);
	// A list, or the section, starts as a key's value (collectionOf() says which it takes).
	void open(const KeySpec &key, const YAML::Mark &mark);
	// An entry of a list.
	void item(const Read &entry);
	// For the warnings.
	LoadedConfig &loaded();
	// An error was noted: no config comes of the file, and what it keeps goes now.
	void failed();
	// The checks that need the whole file: each list against cidrLimit (which may come
	// after it), the sections' requirements (`discoveryKey`, `guardKey`: where their keys
	// are).
	std::vector<Error> checkWholeFile(const YAML::Mark &discoveryKey, const YAML::Mark &guardKey);
	LoadedConfig finish();

private:
	struct Model; // the config and the lists as they are read, and each kind's reader
	std::unique_ptr<Model> model_;
};

} // namespace ipmasq::config_keys
