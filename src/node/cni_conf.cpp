// SPDX-License-Identifier: Apache-2.0
// CNI network configs: nlohmann's SAX parser under our bounds, keeping only the host-local
// IPAM subnets, and the bounded read of the directory.
#include "ip-masq-agent/node/cni_conf.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <istream>
#include <streambuf>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "ip-masq-agent/base/ascii.h"
#include "ip-masq-agent/base/bounded_file.h"
#include "ip-masq-agent/base/escape.h"

namespace ipmasq {

namespace {

// Where a value sits in the schema the reader follows; everything else is `ignored` (read,
// checked as JSON, and dropped).
enum class Slot {
	ignored,
	root,
	plugins,     // .conflist's "plugins"
	plugin,	     // one of them (or .conf's root)
	ipam,	     // a plugin's "ipam"
	rangeSets,   // its "ranges"
	rangeSet,    // one range set: a list of ranges
	range,	     // one range
	// The strings (and only they) from here on.
	pluginType,  // a plugin's "type"
	ipamType,    // the ipam's "type"
	rangeSubnet, // a range's "subnet"
	ipamSubnet,  // the ipam's own "subnet" (host-local's older, single-range form)
};

// What the reader keeps of one plugin until the file is read: its "ipam" may come before its
// "type", and its ranges before the ipam's "type".
struct PluginIpam {
	std::string type;
	std::string ipamType;
	struct Subnet {
		std::string text;
		uint32_t line = 0;
	};
	std::vector<Subnet> subnets;
};

// Plugins of one file, at most.
constexpr size_t kMaxPlugins = 1024;

// What a container slot is called in messages.
const char *slotName(Slot slot)
{
	switch (slot) {
	case Slot::plugins: return "\"plugins\"";
	case Slot::plugin: return "a plugin";
	case Slot::ipam: return "\"ipam\"";
	case Slot::rangeSets: return "\"ranges\"";
	case Slot::rangeSet: return "a range set of \"ranges\"";
	case Slot::range: return "a range";
	default: return "this value";
	}
}

// Past JSON's white space from `at`.
size_t spaceEnd(std::string_view text, size_t at)
{
	while (at < text.size() && (text[at] == ' ' || text[at] == '\t' || text[at] == '\n' || text[at] == '\r'))
		at++;
	return at;
}

// The value of exactly four hex digits.
std::optional<unsigned> hexValue(std::string_view digits)
{
	unsigned value = 0;
	const char *end = digits.data() + digits.size();
	const auto [at, ec] = std::from_chars(digits.data(), end, value, 16);
	if (digits.size() != 4 || ec != std::errc() || at != end)
		return std::nullopt;
	return value;
}

// A JSON number at `at` (RFC 8259's grammar, which nlohmann's lexer follows): where it
// ends, or why it is not one.
struct NumberScan {
	size_t end = std::string_view::npos;
	const char *problem = "expected a value";
};

NumberScan scanNumber(std::string_view text, size_t at)
{
	const auto next = [&](char c) { return at < text.size() && text[at] == c && ++at; };
	const auto digits = [&] {
		const size_t from = at;
		while (at < text.size() && ascii::isDigit(text[at]))
			at++;
		return at > from;
	};
	next('-');
	if (!next('0') && !digits())
		return {};
	if (next('.') && !digits())
		return {.problem = "a number needs digits after \".\""};
	if (next('e') || next('E')) {
		next('+') || next('-');
		if (!digits())
			return {.problem = "a number needs digits in its exponent"};
	}
	return {.end = at};
}

// The text as nlohmann gets it. The library refuses three things this reader accepts (as
// libcni's Go decoder does the first two): strings that are not UTF-8, \u escapes of lone
// surrogates, and numbers past a double's range. So inside a string each byte 0x80-0xff
// becomes its two-byte UTF-8 form (rawBytes turns it back), and a \u escape of anything
// past ASCII becomes \u007f (a byte that no key or CIDR holds); outside, a well-formed
// number becomes "0 " (its value is never used; the space is what the lexer reads past it,
// so the read position at its event is on its line), a NUL, which nlohmann takes for the
// end of the input, becomes 0x01, and from a malformed number on (where the library stops)
// the text stays as it is. Newlines stay: the lines are the file's.
std::string libraryText(std::string_view text)
{
	std::string out;
	out.reserve(text.size() + text.size() / 4);
	bool inString = false;
	for (size_t i = 0; i < text.size(); i++) {
		const char c = text[i];
		if (!inString && (c == '-' || ascii::isDigit(c))) {
			const size_t end = scanNumber(text, i).end;
			if (end == std::string_view::npos) // the library stops there: the rest as it is
				return out.append(text.substr(i));
			out += "0 ";
			i = end - 1;
		} else if (!inString) {
			inString = c == '"';
			out += c == '\0' ? '\x01' : c;
		} else if (c == '\\' && i + 1 < text.size()) {
			const auto code = text[i + 1] == 'u' ? hexValue(text.substr(i + 2, 4)) : std::nullopt;
			out += code && *code >= 0x80 ? "\\u007f" : text.substr(i, 2);
			i += code && *code >= 0x80 ? 5 : 1;
		} else if (static_cast<unsigned char>(c) >= 0x80) {
			out += static_cast<char>(0xc0 | static_cast<unsigned char>(c) >> 6);
			out += static_cast<char>(0x80 | (c & 0x3f));
		} else {
			inString = c != '"';
			out += c;
		}
	}
	return out;
}

// A string as the file holds it: libraryText's two-byte forms back to one byte.
void rawBytes(std::string &text)
{
	size_t kept = 0;
	for (size_t i = 0; i < text.size(); i++) {
		const bool pair = static_cast<unsigned char>(text[i]) >= 0x80 && i + 1 < text.size();
		text[kept++] = pair ? static_cast<char>(text[i] << 6 | (text[i + 1] & 0x3f)) : text[i];
		i += pair;
	}
	text.resize(kept);
}

// What is wrong with the string that starts at `at` (nlohmann refused it).
std::string stringProblem(std::string_view text, size_t at)
{
	for (size_t i = at + 1; i < text.size(); i++) {
		if (static_cast<unsigned char>(text[i]) < 0x20)
			return "a control character in a string (write it as an escape)";
		if (text[i] != '\\' || ++i == text.size())
			continue;
		if (std::string_view("\"\\/bfnrtu").find(text[i]) == std::string_view::npos)
			return fmt::format("{} is not an escape", ipmasq::quoted(std::string{'\\', text[i]}));
		if (text[i] == 'u' && !hexValue(text.substr(i + 1, 4)))
			return "a \\u escape needs four hex digits";
	}
	return "a string is not closed";
}

// The read position in the text nlohmann parses: its SAX calls carry none.
class TextBuffer : public std::streambuf
{
public:
	explicit TextBuffer(std::string &text) { setg(text.data(), text.data(), text.data() + text.size()); }
	size_t consumed() const { return static_cast<size_t>(gptr() - eback()); }
};

// nlohmann's SAX handler: follows the schema as the events come, keeps the host-local
// parts, refuses what nests deeper than the bound (the library keeps no bound of its own),
// and tells a syntax error in this reader's words, from where the last event left off.
class CniConfReader
{
public:
	CniConfReader(std::string_view text, const std::string &source, CniConfForm form)
		: text_(libraryText(text)), source_(source), form_(form), buffer_(text_)
	{
	}
	CniConfReader(const CniConfReader &) = delete;

	Result<CniConf> read()
	{
		std::istream in(&buffer_);
		return nlohmann::json::sax_parse(in, this) ? collect() : fail(error_);
	}

	// nlohmann's SAX interface (nlohmann::json_sax): false ends the parse.
	bool null() { return scalar(nullptr); }
	bool boolean(bool) { return scalar(nullptr); }
	bool number_integer(int64_t) { return scalar(nullptr); }
	bool number_unsigned(uint64_t) { return scalar(nullptr); }
	bool number_float(double, const std::string &) { return scalar(nullptr); }
	bool string(std::string &text) { return scalar(&text); }
	bool binary(nlohmann::json::binary_t &) { return scalar(nullptr); }
	bool start_object(size_t) { return open(true); }
	bool start_array(size_t) { return open(false); }
	bool key(std::string &key)
	{
		stack_.back().key = std::move(key);
		return moved(After::key);
	}
	bool end_object() { return close(); }
	bool end_array() { return close(); }
	bool parse_error(size_t, const std::string &, const nlohmann::json::exception &);

private:
	struct Frame {
		bool object = false;
		Slot slot = Slot::ignored;
		std::string key; // an object's current key
	};
	// The last event: a container opened, a key, a value (or a container closed).
	enum class After { open, key, value };

	std::string at(uint32_t line) const { return fmt::format("{}:{}: ", escaped(source_), line); }
	uint32_t lineAt(size_t position);
	// The line where the library stopped reading: at the end of the event's token (past a
	// number, the space libraryText put after it).
	uint32_t lineHere() { return lineAt(buffer_.consumed()); }
	bool refuse(const std::string &what)
	{
		error_ = at(lineHere()) + what;
		return false;
	}
	bool moved(After after)
	{
		after_ = after;
		resume_ = buffer_.consumed();
		return true;
	}
	bool open(bool object);
	bool close()
	{
		stack_.pop_back();
		return moved(After::value);
	}
	bool scalar(std::string *text);
	Slot childSlot() const;
	bool enter(Slot slot, bool object);
	std::pair<size_t, std::string> syntaxError() const;
	Result<CniConf> collect() const;

	std::string text_; // libraryText's
	const std::string &source_;
	CniConfForm form_;
	TextBuffer buffer_;
	std::string error_;
	After after_ = After::open;
	size_t resume_ = 0; // where the last event's token ended
	size_t countedTo_ = 0; // lineAt's count so far
	uint32_t line_ = 1;
	std::vector<Frame> stack_;
	std::vector<PluginIpam> plugins_;
	size_t subnets_ = 0;
};

// The calls come in the order of the text (an event's position, then an error's past it):
// each counts on from the last.
uint32_t CniConfReader::lineAt(size_t position)
{
	line_ += static_cast<uint32_t>(std::count(text_.begin() + long(countedTo_), text_.begin() + long(position), '\n'));
	countedTo_ = position;
	return line_;
}

bool CniConfReader::open(bool object)
{
	if (stack_.size() >= kMaxCniJsonDepth)
		return refuse(fmt::format("nested more than {} levels deep: a CNI network config nests a few",
					  kMaxCniJsonDepth));
	const Slot slot = childSlot();
	if (!enter(slot, object))
		return false;
	stack_.push_back(Frame{object, slot, {}});
	return moved(After::open);
}

// What is wrong where the library stopped, in the words this reader always used: from where
// the last event left off, past a ":" or "," the library took without an event, to the
// token it could not take. Returns its position and the message.
std::pair<size_t, std::string> CniConfReader::syntaxError() const
{
	size_t i = spaceEnd(text_, resume_);
	if (stack_.empty())
		return {i, "text after the end of the object"};
	const bool object = stack_.back().object;
	enum class Want { key, colon, separator, value } want = after_ == After::key ? Want::colon
							       : after_ == After::value ? Want::separator
							       : object ? Want::key : Want::value;
	const auto past = [&](char c, Want then) {
		if (i < text_.size() && text_[i] == c)
			want = then, i = spaceEnd(text_, i + 1);
	};
	if (want == Want::colon)
		past(':', Want::value);
	else if (want == Want::separator)
		past(',', object ? Want::key : Want::value);
	if (i == text_.size())
		return {i, "the file ends inside the object"};
	const char c = text_[i];
	switch (want) {
	case Want::key: return {i, c == '"' ? stringProblem(text_, i) : "expected a key in double quotes"};
	case Want::colon: return {i, "expected \":\" after the key"};
	case Want::separator: return {i, object ? "expected \",\" or \"}\"" : "expected \",\" or \"]\""};
	case Want::value: break;
	}
	if (c == '"')
		return {i, stringProblem(text_, i)};
	if (c == '-' || ascii::isDigit(c))
		return {i, scanNumber(text_, i).problem};
	return {i, "expected a value (a string, number, object, list, true, false or null)"};
}

bool CniConfReader::parse_error(size_t, const std::string &, const nlohmann::json::exception &)
{
	const auto [position, what] = syntaxError();
	error_ = fmt::format("{}JSON syntax error: {} (a CNI network config is a JSON object)", at(lineAt(position)), what);
	return false;
}

// Where the value that starts now sits: from its container's slot and key.
Slot CniConfReader::childSlot() const
{
	if (stack_.empty())
		return Slot::root;
	const Frame &parent = stack_.back();
	const std::string &key = parent.key;
	switch (parent.slot) {
	case Slot::root:
		if (form_ == CniConfForm::list)
			return key == "plugins" ? Slot::plugins : Slot::ignored;
		[[fallthrough]]; // .conf: the root is the plugin
	case Slot::plugin:
		return key == "ipam" ? Slot::ipam : key == "type" ? Slot::pluginType : Slot::ignored;
	case Slot::plugins: return Slot::plugin;
	case Slot::ipam:
		return key == "type"	 ? Slot::ipamType
		       : key == "ranges" ? Slot::rangeSets
		       : key == "subnet" ? Slot::ipamSubnet
					 : Slot::ignored;
	case Slot::rangeSets: return Slot::rangeSet;
	case Slot::rangeSet: return Slot::range;
	case Slot::range: return key == "subnet" ? Slot::rangeSubnet : Slot::ignored;
	default: return Slot::ignored;
	}
}

// A container starts in `slot`: is it the kind the schema has there?
bool CniConfReader::enter(Slot slot, bool object)
{
	const auto expected = [&](const char *what) {
		return refuse(fmt::format("{} must be {}", slotName(slot), what));
	};
	switch (slot) {
	case Slot::ignored: return true;
	case Slot::root:
		if (form_ == CniConfForm::single)
			plugins_.emplace_back(); // the root is the one plugin
		return true;
	case Slot::plugins:
	case Slot::rangeSets:
	case Slot::rangeSet:
		return !object || expected("a list");
	case Slot::plugin:
		if (!object)
			return expected("an object");
		if (plugins_.size() == kMaxPlugins)
			return refuse(fmt::format("more than {} plugins", kMaxPlugins));
		plugins_.emplace_back();
		return true;
	case Slot::ipam:
		if (!object)
			return expected("an object");
		plugins_.back().ipamType.clear(); // a repeated "ipam": the last one counts
		plugins_.back().subnets.clear();
		return true;
	case Slot::range: return object || expected("an object");
	default:
		return refuse(fmt::format("expected a string here, got {}", object ? "an object" : "a list"));
	}
}

// A string (`text`) or another scalar (nullptr) in the slot of the value that starts now.
bool CniConfReader::scalar(std::string *text)
{
	const Slot slot = childSlot();
	if (slot == Slot::ignored)
		return moved(After::value);
	if (slot < Slot::pluginType)
		return refuse("expected a list or an object here, got a single value");
	if (!text)
		return refuse("expected a string here");
	rawBytes(*text);
	PluginIpam &plugin = plugins_.back();
	if (slot == Slot::pluginType)
		plugin.type = std::move(*text);
	else if (slot == Slot::ipamType)
		plugin.ipamType = std::move(*text);
	else if (++subnets_ > kMaxCniSubnets)
		return refuse(fmt::format("more than {} subnets in the file", kMaxCniSubnets));
	else
		plugin.subnets.push_back(PluginIpam::Subnet{std::move(*text), lineHere()});
	return moved(After::value);
}

// The host-local subnets, parsed, once the whole file is read.
Result<CniConf> CniConfReader::collect() const
{
	CniConf conf;
	for (const PluginIpam &plugin : plugins_) {
		if (plugin.ipamType != "host-local")
			continue;
		for (const PluginIpam::Subnet &subnet : plugin.subnets) {
			const std::string where = fmt::format("{}subnet of host-local: ", at(subnet.line));
			if (subnet.text.size() > kMaxPrefixTextBytes)
				return fail(fmt::format("{}{} is not a CIDR", where, quotedShort(subnet.text)));
			auto prefix = parsePrefix(subnet.text);
			if (!prefix)
				return fail(prefix.error().withContext(where));
			prefix->spelling.clear();
			conf.subnets.push_back(CniSubnet{std::move(*prefix), plugin.type, subnet.line});
		}
	}
	return conf;
}

} // namespace

std::optional<CniConfForm> cniConfFormOf(std::string_view name)
{
	const auto endsWith = [&](std::string_view suffix) {
		return name.size() > suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
	};
	if (name.empty() || name.front() == '.')
		return std::nullopt;
	if (endsWith(".conflist"))
		return CniConfForm::list;
	if (endsWith(".conf"))
		return CniConfForm::single;
	return std::nullopt;
}

Result<CniConf> parseCniConf(std::string_view text, const std::string &source, CniConfForm form)
{
	const size_t start = spaceEnd(text, 0);
	if (start == text.size() || text[start] != '{')
		return fail(fmt::format("{}:{}: the file must be a JSON object, such as {{\"cniVersion\": "
					"\"1.0.0\", ...}}", escaped(source),
					1 + std::count(text.begin(), text.begin() + long(start), '\n')));
	return CniConfReader(text, source, form).read();
}

namespace {

Result<CniConf> readCniConfFile(const std::string &path, CniConfForm form)
{
	const FileRead read = readBoundedFile(path, kMaxCniConfBytes);
	if (read.outcome != FileRead::Outcome::text)
		return fail(fileReadError(path, read, kMaxCniConfBytes));
	return parseCniConf(read.text, path, form);
}

} // namespace

Result<std::optional<std::vector<CniConfFile>>> readCniConfDir(const std::string &dir)
{
	using Files = std::optional<std::vector<CniConfFile>>;
	const DirListing listing = listRegularFiles(
		dir, [](std::string_view name) { return cniConfFormOf(name).has_value(); },
		kMaxCniConfFiles, kMaxCniConfDirEntries);
	switch (listing.outcome) {
	case DirListing::Outcome::names: break;
	case DirListing::Outcome::absent: return Files();
	case DirListing::Outcome::notDirectory:
		return fail(fmt::format("{}: is not a directory: cniConfDir names the CNI "
					"configuration directory, such as /etc/cni/net.d", escaped(dir)),
			    ENOTDIR);
	case DirListing::Outcome::tooManyEntries:
		return fail(fmt::format("{}: more than {} entries: is this the CNI configuration "
					"directory?", escaped(dir), kMaxCniConfDirEntries),
			    E2BIG);
	case DirListing::Outcome::tooManyFiles:
		return fail(fmt::format("{}: more than {} *.conflist and *.conf files: is this the CNI "
					"configuration directory?", escaped(dir), kMaxCniConfFiles),
			    E2BIG);
	case DirListing::Outcome::failed:
		return fail(fmt::format("{}: cannot list it: {}",
					escaped(listing.name.empty() ? dir : dir + "/" + listing.name),
					std::strerror(listing.errnum)),
			    listing.errnum);
	}
	std::vector<CniConfFile> files;
	for (const std::string &name : listing.names) {
		const std::string path = (std::filesystem::path(dir) / name).string();
		files.push_back(CniConfFile{path, readCniConfFile(path, *cniConfFormOf(name))});
	}
	return Files(std::move(files));
}

} // namespace ipmasq
