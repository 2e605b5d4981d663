// SPDX-License-Identifier: Apache-2.0
// The agent's config file: read bounded, and streamed through yaml-cpp's event API by one
// handler that drives the tables of keys (config_keys.h) into the model.
#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/base/bounded_file.h"
#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/config/config_keys.h"
#include "ip-masq-agent/config/plain_yaml.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
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

using namespace config_keys;

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

// describeConfig lists a list of up to this many entries in full, else the first few.
constexpr size_t kDescribedInFull = 16;
constexpr size_t kDescribedFirst = 8;

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

// A user error that stops yaml-cpp at once: where going on would cost memory or
// recursion in yaml-cpp itself (anchors, nesting), or read a second document. Thrown
// through yaml-cpp (C++ throughout, made to unwind) and caught in parseText().
struct StopParsing {
	Error error;
};

[[noreturn]] void stopParsing(std::string message) { throw StopParsing{Error(std::move(message))}; }

// Reads yaml-cpp's events by the tables of keys. Where it is goes on a small explicit
// stack (the config's mapping, the section's, a list, a value being skipped), never
// deeper than the tables nest; a skipped value is counted through, not looked at. No
// recursion, and memory is the model plus what the anchors recorded.
class ConfigHandler final : public YAML::EventHandler
{
public:
	ConfigHandler(const std::string &source, const ConfigFlags &flags)
		: source_(source), flags_(flags), model_(source, flags)
	{
		stack_.reserve(kMaxFrames);
	}

	Result<LoadedConfig> finish();
	// The errors noted, and then the one that stopped yaml-cpp.
	Error stoppedBy(const Error &stop);

	void OnDocumentStart(const YAML::Mark &mark) override;
	void OnDocumentEnd() override {}
	void OnNull(const YAML::Mark &mark, YAML::anchor_t anchor) override
	{
		onNode(Value{Kind::null, {}, true, mark, {}}, anchor);
	}
	void OnAlias(const YAML::Mark &mark, YAML::anchor_t anchor) override;
	void OnScalar(const YAML::Mark &mark, const std::string &tag, YAML::anchor_t anchor,
		      const std::string &value) override
	{
		// yaml-cpp tags a quoted scalar "!" and a plain one "?" (or with an explicit tag).
		onNode(Value{Kind::scalar, value, tag != "!", mark, {}}, anchor);
	}
	void OnSequenceStart(const YAML::Mark &mark, const std::string &, YAML::anchor_t anchor,
			     YAML::EmitterStyle::value) override
	{
		onNode(Value{Kind::list, {}, true, mark, {}}, anchor);
	}
	void OnSequenceEnd() override { guarded([&] { onEnd(); }); }
	void OnMapStart(const YAML::Mark &mark, const std::string &, YAML::anchor_t anchor,
			YAML::EmitterStyle::value) override
	{
		onNode(Value{Kind::mapping, {}, true, mark, {}}, anchor);
	}
	void OnMapEnd() override { guarded([&] { onEnd(); }); }
	void OnAnchor(const YAML::Mark &mark, const std::string &name) override;

private:
	// Where the handler is, innermost last: a mapping of `table`'s keys, a list (of
	// `key`), or a value being skipped (`count` levels deep).
	struct Frame {
		enum class Type { mapping, list, skip } type;
		const Table *table = nullptr; // a list's: its key's table
		// A mapping: the key whose value comes next (valueNext; nullptr: skip the value)
		// and where it is. A list: its key.
		const KeySpec *key = nullptr;
		bool valueNext = false;
		YAML::Mark keyMark = YAML::Mark::null_mark();
		size_t count = 0; // a list: its entries so far; skip: how deep
	};
	// The config's mapping, the section's, one of its lists, and a value being skipped.
	static constexpr size_t kMaxFrames = 4;

	struct Anchor {
		std::string name;
		Kind kind = Kind::null;
		std::string text;
		bool plain = true;
	};

	// A key of a mapping read so far (`key`: which; nullptr: an unknown key).
	struct SeenKey {
		const KeySpec *key;
		std::string spelling;
		YAML::Mark mark;
	};

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
	void recordAnchor(YAML::anchor_t anchor, const Value &value);
	// A node: a scalar, null, an alias, or a list or mapping that starts (no alias).
	void onNode(const Value &value, YAML::anchor_t anchor);
	void onValue(const Value &value, bool opens);
	void onEnd();
	void skip() { stack_.push_back(Frame{.type = Frame::Type::skip, .count = 1}); }

	void onKey(Frame &mapping, const Value &key, bool opens);
	void onUnknownKey(const Table &table, std::string_view spelling, const YAML::Mark &mark,
			  const std::string &here);
	void onKeyValue(const Frame &mapping, const Value &value, bool opens);

	const std::string &source_;
	const ConfigFlags &flags_;
	Values model_;
	// The errors noted, the first kMaxReportedConfigErrors of them, and how many in all.
	std::vector<std::string> errors_;
	size_t errorCount_ = 0;
	bool stopped_ = false; // an error that stops: every later event is ignored

	int documents_ = 0;
	size_t values_ = 0;
	std::vector<Frame> stack_; // empty: before the config's mapping, or after it (done_)
	bool done_ = false;
	std::vector<SeenKey> seen_;
	YAML::Mark sectionKey_ = YAML::Mark::null_mark(); // where nonMasqueradeDiscovery is
	YAML::Mark guardKey_ = YAML::Mark::null_mark(); // where snatGuard is
	std::vector<Anchor> anchors_; // yaml-cpp numbers anchors 1, 2, ... per document
	std::string pendingAnchorName_;
	size_t anchorNames_ = 0;
};

void ConfigHandler::noteError(Error error, bool stops)
{
	// No config comes out of a file with an error.
	if (errorCount_++ == 0)
		model_.failed();
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
					"merge the two", at(source_, mark)));
}

void ConfigHandler::OnAnchor(const YAML::Mark &mark, const std::string &name)
{
	// yaml-cpp keeps every anchor name itself: stop before that can grow with the file.
	if (++anchorNames_ > kMaxConfigAnchors)
		stopParsing(fmt::format("{}more than {} anchors (&name); an ip-masq-agent config "
					"needs few if any: write the values out", at(source_, mark),
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
					"the right file?", at(source_, mark), kMaxConfigValues,
					kMaxNonMasqueradeCIDRs));
}

void ConfigHandler::recordAnchor(YAML::anchor_t anchor, const Value &value)
{
	if (anchor == YAML::NullAnchor)
		return;
	if (anchors_.size() < anchor)
		anchors_.resize(anchor);
	Anchor &slot = anchors_[anchor - 1];
	slot.name = std::move(pendingAnchorName_);
	pendingAnchorName_.clear();
	slot.kind = value.kind;
	// Only scalars keep their text: an alias of a collection is refused where it matters
	// (and ignored where it does not), so no collection is ever copied.
	slot.text = std::string(value.text);
	slot.plain = value.plain;
}

void ConfigHandler::onNode(const Value &value, YAML::anchor_t anchor)
{
	countValue(value.mark);
	guarded([&] {
		recordAnchor(anchor, value);
		onValue(value, value.kind == Kind::list || value.kind == Kind::mapping);
	});
}

void ConfigHandler::OnAlias(const YAML::Mark &mark, YAML::anchor_t anchor)
{
	countValue(mark);
	guarded([&] {
		if (anchor == YAML::NullAnchor || anchor > anchors_.size())
			refuseAndStop(fmt::format("{}an alias refers to an anchor that is not defined "
						  "before it", at(source_, mark)));
		const Anchor &target = anchors_[anchor - 1];
		onValue(Value{target.kind, target.text, target.plain, mark, target.name}, false);
	});
}

// Any node, where the stack says it is.
void ConfigHandler::onValue(const Value &value, bool opens)
{
	if (done_)
		return;
	if (stack_.empty()) {
		if (value.kind == Kind::null)
			return; // an empty document: all defaults
		if (!opens || value.kind != Kind::mapping)
			refuseAndStop(fmt::format("{}the config must be a mapping of keys such as "
						  "nonMasqueradeCIDRs and cidrLimit, but it is {}",
						  at(source_, value.mark), value.describe()));
		stack_.push_back(Frame{.type = Frame::Type::mapping, .table = &kConfigTable});
		return;
	}
	Frame &top = stack_.back();
	switch (top.type) {
	case Frame::Type::skip:
		// The config's mapping and the skipped value are two levels already.
		if (opens && ++top.count + 1 > kMaxConfigDepth)
			stopParsing(fmt::format("{}nested more than {} levels deep; an ip-masq-agent config "
						"is one mapping with one list in it: check the indentation",
						at(source_, value.mark), kMaxConfigDepth));
		return;
	case Frame::Type::list: {
		const Frame list = top;
		const size_t index = top.count++;
		if (opens)
			skip(); // and refused as an entry
		return model_.item(Read{source_, *list.table, *list.key, value, index});
	}
	case Frame::Type::mapping:
		if (!top.valueNext)
			return onKey(top, value, opens);
		top.valueNext = false;
		return onKeyValue(Frame(top), value, opens);
	}
}

void ConfigHandler::onEnd()
{
	if (stack_.empty())
		return;
	if (stack_.back().type == Frame::Type::skip && --stack_.back().count > 0)
		return;
	stack_.pop_back();
	done_ = stack_.empty(); // the config's mapping ends
}

void ConfigHandler::onKey(Frame &mapping, const Value &key, bool opens)
{
	const Table &table = *mapping.table;
	const bool top = table.section.empty();
	// "file:line:col: ", and in the section "nonMasqueradeDiscovery: ".
	const std::string here = top ? at(source_, key.mark) : where(source_, key.mark, table.section);
	if (opens)
		refuseAndStop(fmt::format("{}a key must be a name such as {}, but this one is {} (a "
					  "complex key): write the key as plain text", here,
					  table.keys[0].name, key.describe()));
	// Until the key is known good, its value is skipped as an unknown key's: a refused
	// key's value is then read as nothing, and the next key as a key.
	mapping.valueNext = true;
	mapping.key = nullptr;
	mapping.keyMark = key.mark;
	if (!key.alias.empty())
		refuse(fmt::format("{}an alias (*{}) cannot be a key: write the key itself", here,
				   escaped(key.alias)));
	// yaml-cpp's Node API read a null key as the text "null": keep that (an unknown key).
	if (key.kind != Kind::scalar && !(top && key.kind == Kind::null))
		refuse(fmt::format("{}a key must be a name such as {}, but this one is {}", here,
				   table.keys[0].name, key.describe()));
	if (top && key.kind == Kind::scalar && key.plain && key.text == "<<")
		refuse(fmt::format("{}merge keys (<<) are not supported: write the keys out in the "
				   "config's mapping", here));
	const std::string_view spelling = key.kind == Kind::null ? std::string_view("null") : key.text;
	const KeySpec *known = knownKey(table, spelling);
	if (!known)
		return onUnknownKey(table, spelling, key.mark, here);
	// Upstream matches keys case-insensitively (Go's encoding/json), so "cidrLimit"
	// and "CIDRLimit" are one key: a second one would silently win there.
	for (const SeenKey &seen : seen_)
		if (seen.key == known)
			refuse(fmt::format("{}{}: duplicate key: it is already set at line {}, column {}{}; "
					   "keys match case-insensitively{}: keep one of them", here, known->name,
					   seen.mark.line + 1, seen.mark.column + 1,
					   seen.spelling == spelling ? "" : fmt::format(" (as {})", shown(seen.spelling)),
					   top ? ", as in upstream" : ""));
	seen_.push_back(SeenKey{known, std::string(spelling), key.mark});
	mapping.key = known;
	// Point out the spelling that every other tool expects.
	if (spelling != known->name)
		model_.loaded().warnings.push_back(fmt::format(
			"{}{}: read as \"{}\"; please spell it exactly so", here, escaped(spelling), known->name));
}

// A key the agent does not know. At the top, upstream ignores it, and so does the agent,
// loudly (the warning names the key it most likely means); with --strict-config it is an
// error. The section is the agent's own: a key it does not know is a typo of one it does,
// and reading the rest would discover less than the operator meant.
void ConfigHandler::onUnknownKey(const Table &table, std::string_view spelling, const YAML::Mark &mark,
				 const std::string &here)
{
	if (!table.section.empty()) {
		const std::optional<std::string_view> meant = config_keys::suggestKeyIn(table, spelling);
		refuse(fmt::format("{}unknown key {}{} (the section's keys: {}): fix its spelling", here,
				   shown(spelling), meant ? fmt::format(": did you mean \"{}\"?", *meant) : "",
				   keyNames(table)));
	}
	size_t unknown = 0;
	for (const SeenKey &seen : seen_) {
		if (seen.key)
			continue;
		unknown++;
		if (seen.spelling == spelling)
			refuse(fmt::format("{}duplicate key {}: it is already set at line {}, column {}: "
					   "keep one of them", here, shown(spelling), seen.mark.line + 1,
					   seen.mark.column + 1));
	}
	if (unknown >= kMaxUnknownConfigKeys)
		refuseAndStop(fmt::format("{}more than {} unknown keys; is this the ip-masq-agent "
					  "config? (known keys: {})", here, kMaxUnknownConfigKeys,
					  keyNames(table)));
	seen_.push_back(SeenKey{nullptr, std::string(spelling), mark});
	const std::optional<std::string_view> meant = suggestKey(spelling);
	if (flags_.strictKeys)
		refuse(fmt::format("{}unknown key {} (--strict-config: unknown keys are errors): {}", here,
				   shown(spelling),
				   meant ? fmt::format("did you mean \"{}\"? Fix its spelling, or remove it", *meant)
					 : fmt::format("remove it, or fix its spelling (known keys: {})",
						       keyNames(table))));
	std::string warning = fmt::format("{}ignoring unknown key {}{}", here, shown(spelling),
					  meant ? fmt::format(": did you mean \"{}\"?", *meant)
						: fmt::format(" (known keys: {})", keyNames(table)));
	model_.loaded().unknownKeys.push_back(warning);
	model_.loaded().warnings.push_back(std::move(warning));
}

void ConfigHandler::onKeyValue(const Frame &mapping, const Value &value, bool opens)
{
	if (!mapping.key) {
		if (opens)
			skip(); // an unknown or refused key's value: counted through, not read
		return;
	}
	const Table &table = *mapping.table;
	const KeySpec &key = *mapping.key;
	const Read read{source_, table, key, value};
	// An alias of a list or mapping is refused where it would be read: following it would
	// copy, and an alias can repeat a list without end.
	if (!opens && (value.kind == Kind::list || value.kind == Kind::mapping)) {
		const std::string_view of = table.section.empty() ? key.aliasOf ? key.aliasOf : "" : "a collection";
		if (of == "a collection" || of == (value.kind == Kind::list ? "a list" : "a mapping"))
			refuse(fmt::format("{}*{} is an alias of {}; aliases of lists and mappings are not "
					   "supported (only of single values): write {} here", read(),
					   escaped(value.alias), of, table.section.empty() ? key.aliasFix : "it"));
	}
	if (!opens)
		return model_.single(read);
	if (value.kind != std::visit([](auto member) { return collectionOf(member); }, key.slot)) {
		skip();
		read.wrongType();
	}
	model_.open(key, value.mark);
	if (key.section) {
		(key.section == &config_keys::kSnatGuardTable ? guardKey_ : sectionKey_) = mapping.keyMark;
		stack_.push_back(Frame{.type = Frame::Type::mapping, .table = key.section});
	} else {
		stack_.push_back(Frame{.type = Frame::Type::list, .table = &table, .key = &key});
	}
}

Result<LoadedConfig> ConfigHandler::finish()
{
	// After an error that stopped the reading, the file was not read whole: nothing more
	// is checked.
	if (!stopped_)
		for (Error &error : model_.checkWholeFile(sectionKey_, guardKey_))
			noteError(std::move(error));
	if (errorCount_ > 0)
		return fail(errorsMessage());
	return model_.finish();
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
	if (config.snatGuard)
		out += fmt::format("snatGuard={{{}}} ", describeSnatGuard(*config.snatGuard));
	return out + fmt::format("cidrLimit={} masqLinkLocal={} masqLinkLocalIPv6={} resyncInterval={}",
				 config.cidrLimit, config.masqLinkLocal, config.masqLinkLocalIPv6,
				 formatGoDuration(config.resyncInterval));
}

} // namespace ipmasq
