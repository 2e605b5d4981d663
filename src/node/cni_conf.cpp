// SPDX-License-Identifier: Apache-2.0
// CNI network configs: a JSON reader with an explicit stack (no recursion), which keeps only
// the host-local IPAM subnets, and the bounded read of the directory.
#include "ip-masq-agent/node/cni_conf.h"

#include <cstring>
#include <filesystem>

#include <fmt/format.h>

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
	pluginType,  // a plugin's "type" (a string)
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

// The longest CIDR text: an IPv6 address of 45 bytes with an embedded IPv4, and "/128".
constexpr size_t kMaxCidrBytes = 49;
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

bool isJsonSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

class CniConfReader
{
public:
	CniConfReader(std::string_view text, const std::string &source, CniConfForm form)
		: text_(text), source_(source), form_(form)
	{
	}

	Result<CniConf> read();

private:
	struct Frame {
		bool object = false;
		Slot slot = Slot::ignored;
		std::string key; // an object's current key
	};
	enum class Expect { value, valueOrEnd, keyOrEnd, key, colon, commaOrEnd, done };

	std::string at(uint32_t line) const { return fmt::format("{}:{}: ", escaped(source_), line); }
	tl::unexpected<Error> syntax(const std::string &what) const
	{
		return fail(fmt::format("{}JSON syntax error: {} (a CNI network config is a JSON "
					"object)", at(line_), what));
	}
	char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
	bool atEnd() const { return pos_ >= text_.size(); }
	void skipSpace();
	Status step();
	Status value();
	Status closeContainer();
	Result<std::string> string();
	Status number();
	Status literal();
	Slot childSlot() const;
	Status enter(Slot slot, bool object);
	Status scalar(Slot slot, const std::string *text);
	Result<CniConf> collect() const;

	std::string_view text_;
	const std::string &source_;
	CniConfForm form_;
	size_t pos_ = 0;
	uint32_t line_ = 1;
	std::vector<Frame> stack_;
	Expect expect_ = Expect::value;
	std::vector<PluginIpam> plugins_;
	size_t subnets_ = 0;
};

void CniConfReader::skipSpace()
{
	while (!atEnd() && isJsonSpace(text_[pos_])) {
		if (text_[pos_] == '\n')
			line_++;
		pos_++;
	}
}

Result<CniConf> CniConfReader::read()
{
	skipSpace();
	if (peek() != '{')
		return fail(fmt::format("{}the file must be a JSON object, such as {{\"cniVersion\": "
					"\"1.0.0\", ...}}", at(line_)));
	// Each step consumes at least one byte, or ends the loop: the file bounds the steps.
	while (expect_ != Expect::done)
		if (Status s = step(); !s)
			return fail(s.error());
	skipSpace();
	if (!atEnd())
		return syntax("text after the end of the object");
	return collect();
}

Status CniConfReader::step()
{
	skipSpace();
	if (atEnd())
		return syntax("the file ends inside the object");
	const char c = peek();
	switch (expect_) {
	case Expect::value: return value();
	case Expect::valueOrEnd: return c == ']' ? closeContainer() : value();
	case Expect::keyOrEnd:
		if (c == '}')
			return closeContainer();
		[[fallthrough]];
	case Expect::key: {
		if (c != '"')
			return syntax("expected a key in double quotes");
		auto key = string();
		if (!key)
			return fail(key.error());
		stack_.back().key = std::move(*key);
		expect_ = Expect::colon;
		return {};
	}
	case Expect::colon:
		if (c != ':')
			return syntax("expected \":\" after the key");
		pos_++;
		expect_ = Expect::value;
		return {};
	case Expect::commaOrEnd:
		if (c == ',') {
			pos_++;
			expect_ = stack_.back().object ? Expect::key : Expect::value;
			return {};
		}
		if (c == (stack_.back().object ? '}' : ']'))
			return closeContainer();
		return syntax(stack_.back().object ? "expected \",\" or \"}\"" : "expected \",\" or \"]\"");
	case Expect::done: return {};
	}
	return {};
}

Status CniConfReader::closeContainer()
{
	pos_++;
	stack_.pop_back();
	expect_ = stack_.empty() ? Expect::done : Expect::commaOrEnd;
	return {};
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

Status CniConfReader::value()
{
	const Slot slot = childSlot();
	const char c = peek();
	if (c == '{' || c == '[') {
		if (stack_.size() >= kMaxCniJsonDepth)
			return fail(fmt::format("{}nested more than {} levels deep: a CNI network config "
						"nests a few", at(line_), kMaxCniJsonDepth));
		if (Status s = enter(slot, c == '{'); !s)
			return s;
		pos_++;
		stack_.push_back(Frame{c == '{', slot, {}});
		expect_ = c == '{' ? Expect::keyOrEnd : Expect::valueOrEnd;
		return {};
	}
	expect_ = Expect::commaOrEnd;
	if (c == '"') {
		auto text = string(); // holds no raw newline: line_ is still where it starts
		if (!text)
			return fail(text.error());
		return scalar(slot, &*text);
	}
	if (Status s = (c == '-' || ascii::isDigit(c)) ? number() : literal(); !s)
		return s;
	return scalar(slot, nullptr);
}

// A container starts in `slot`: is it the kind the schema has there?
Status CniConfReader::enter(Slot slot, bool object)
{
	const auto expected = [&](const char *what) {
		return fail(fmt::format("{}{} must be {}", at(line_), slotName(slot), what));
	};
	switch (slot) {
	case Slot::ignored: return {};
	case Slot::root:
		if (form_ == CniConfForm::single)
			plugins_.emplace_back(); // the root is the one plugin
		return {};
	case Slot::plugins:
	case Slot::rangeSets:
	case Slot::rangeSet:
		return object ? expected("a list") : Status{};
	case Slot::plugin:
		if (!object)
			return expected("an object");
		if (plugins_.size() == kMaxPlugins)
			return fail(fmt::format("{}more than {} plugins", at(line_), kMaxPlugins));
		plugins_.emplace_back();
		return {};
	case Slot::ipam:
		if (!object)
			return expected("an object");
		plugins_.back().ipamType.clear(); // a repeated "ipam": the last one counts
		plugins_.back().subnets.clear();
		return {};
	case Slot::range: return object ? Status{} : expected("an object");
	default:
		return fail(fmt::format("{}expected a string here, got {}", at(line_),
					object ? "an object" : "a list"));
	}
}

// A string (`text`) or another scalar (nullptr) in `slot`.
Status CniConfReader::scalar(Slot slot, const std::string *text)
{
	switch (slot) {
	case Slot::pluginType:
	case Slot::ipamType:
	case Slot::rangeSubnet:
	case Slot::ipamSubnet: break;
	case Slot::ignored: return {};
	default:
		return fail(fmt::format("{}expected {} here, got a single value", at(line_),
					slot == Slot::root ? "an object" : "a list or an object"));
	}
	if (!text)
		return fail(fmt::format("{}expected a string here", at(line_)));
	PluginIpam &plugin = plugins_.back();
	if (slot == Slot::pluginType)
		plugin.type = *text;
	else if (slot == Slot::ipamType)
		plugin.ipamType = *text;
	else if (++subnets_ > kMaxCniSubnets)
		return fail(fmt::format("{}more than {} subnets in the file", at(line_), kMaxCniSubnets));
	else
		plugin.subnets.push_back(PluginIpam::Subnet{*text, line_});
	return {};
}

// The strings of the file are short; a key or value is read whole, escapes decoded.
Result<std::string> CniConfReader::string()
{
	pos_++; // the opening quote
	std::string out;
	while (!atEnd()) {
		const char c = text_[pos_++];
		if (c == '"')
			return out;
		if (static_cast<unsigned char>(c) < 0x20)
			return syntax("a control character in a string (write it as an escape)");
		if (c != '\\') {
			out += c;
			continue;
		}
		if (atEnd())
			break;
		const char e = text_[pos_++];
		switch (e) {
		case '"': case '\\': case '/': out += e; break;
		case 'b': out += '\b'; break;
		case 'f': out += '\f'; break;
		case 'n': out += '\n'; break;
		case 'r': out += '\r'; break;
		case 't': out += '\t'; break;
		case 'u': {
			if (text_.size() - pos_ < 4)
				return syntax("a \\u escape needs four hex digits");
			unsigned code = 0;
			for (int i = 0; i < 4; i++) {
				const char h = text_[pos_++];
				const int digit = ascii::isDigit(h) ? h - '0'
					: (h >= 'a' && h <= 'f')     ? h - 'a' + 10
					: (h >= 'A' && h <= 'F')     ? h - 'A' + 10
								     : -1;
				if (digit < 0)
					return syntax("a \\u escape needs four hex digits");
				code = code * 16 + static_cast<unsigned>(digit);
			}
			// Only an ASCII character can matter to a key or a CIDR: anything else
			// stands in as one byte that no key or CIDR holds.
			out += code < 0x80 ? static_cast<char>(code) : '\x7f';
			break;
		}
		default: return syntax(fmt::format("{} is not an escape", ipmasq::quoted(std::string{'\\', e})));
		}
	}
	return syntax("a string is not closed");
}

Status CniConfReader::number()
{
	const auto digits = [&] {
		const size_t from = pos_;
		while (!atEnd() && ascii::isDigit(text_[pos_]))
			pos_++;
		return pos_ - from;
	};
	if (peek() == '-')
		pos_++;
	if (peek() == '0')
		pos_++;
	else if (digits() == 0)
		return syntax("expected a value");
	if (peek() == '.') {
		pos_++;
		if (digits() == 0)
			return syntax("a number needs digits after \".\"");
	}
	if (peek() == 'e' || peek() == 'E') {
		pos_++;
		if (peek() == '+' || peek() == '-')
			pos_++;
		if (digits() == 0)
			return syntax("a number needs digits in its exponent");
	}
	return {};
}

Status CniConfReader::literal()
{
	for (const std::string_view word : {"true", "false", "null"})
		if (text_.substr(pos_, word.size()) == word) {
			pos_ += word.size();
			return {};
		}
	return syntax("expected a value (a string, number, object, list, true, false or null)");
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
			if (subnet.text.size() > kMaxCidrBytes)
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
