// SPDX-License-Identifier: Apache-2.0
// nft 1.0.6's datatypes, keys and protocol headers as tables, and how a value of each type
// prints (datatype.c, proto.c, meta.c, ct.c of nftables, read, not copied).
#include "ip-masq-agent/nft/codec/vocabulary.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <ctime>
#include <netdb.h>
#include <vector>

#include <arpa/inet.h>
#include <net/if.h>

#include <linux/netfilter/nf_tables.h>

#include <fmt/format.h>

namespace ipmasq::nft {

namespace {

struct Symbol {
	uint32_t value;
	const char *name;
};
using Symbols = std::span<const Symbol>;

// Values as nft's symbol tables give them (big-endian ones already swapped to host terms).
constexpr Symbol kNfproto[] = {{2, "ipv4"}, {10, "ipv6"}};
constexpr Symbol kEthertype[] = {{0x0800, "ip"}, {0x0806, "arp"}, {0x86dd, "ip6"}, {0x8100, "8021q"},
				 {0x88a8, "8021ad"}};
constexpr Symbol kArpop[] = {{1, "request"}, {2, "reply"}, {3, "rrequest"}, {4, "rreply"}, {8, "inrequest"},
			     {9, "inreply"}, {10, "nak"}};
constexpr Symbol kIcmpType[] = {
	{0, "echo-reply"}, {3, "destination-unreachable"}, {4, "source-quench"}, {5, "redirect"},
	{8, "echo-request"}, {9, "router-advertisement"}, {10, "router-solicitation"}, {11, "time-exceeded"},
	{12, "parameter-problem"}, {13, "timestamp-request"}, {14, "timestamp-reply"}, {15, "info-request"},
	{16, "info-reply"}, {17, "address-mask-request"}, {18, "address-mask-reply"}};
constexpr Symbol kIcmp6Type[] = {
	{1, "destination-unreachable"}, {2, "packet-too-big"}, {3, "time-exceeded"}, {4, "parameter-problem"},
	{128, "echo-request"}, {129, "echo-reply"}, {130, "mld-listener-query"}, {131, "mld-listener-report"},
	{132, "mld-listener-done"}, {133, "nd-router-solicit"}, {134, "nd-router-advert"},
	{135, "nd-neighbor-solicit"}, {136, "nd-neighbor-advert"}, {137, "nd-redirect"},
	{138, "router-renumbering"}, {141, "ind-neighbor-solicit"}, {142, "ind-neighbor-advert"},
	{143, "mld2-listener-report"}};
constexpr Symbol kIcmpCode[] = {{0, "net-unreachable"}, {1, "host-unreachable"}, {2, "prot-unreachable"},
				{3, "port-unreachable"}, {9, "net-prohibited"}, {10, "host-prohibited"},
				{13, "admin-prohibited"}, {4, "frag-needed"}};
constexpr Symbol kIcmpv6Code[] = {{0, "no-route"}, {1, "admin-prohibited"}, {3, "addr-unreachable"},
				  {4, "port-unreachable"}, {5, "policy-fail"}, {6, "reject-route"}};
constexpr Symbol kIcmpxCode[] = {{1, "port-unreachable"}, {3, "admin-prohibited"}, {0, "no-route"},
				 {2, "host-unreachable"}};
constexpr Symbol kIgmpType[] = {{0x11, "membership-query"}, {0x12, "membership-report-v1"},
				{0x16, "membership-report-v2"}, {0x22, "membership-report-v3"},
				{0x17, "leave-group"}};
constexpr Symbol kTcpFlag[] = {{0x01, "fin"}, {0x02, "syn"}, {0x04, "rst"}, {0x08, "psh"},
			       {0x10, "ack"}, {0x20, "urg"}, {0x40, "ecn"}, {0x80, "cwr"}};
constexpr Symbol kDccpPkttype[] = {{0, "request"}, {1, "response"}, {2, "data"}, {3, "ack"}, {4, "dataack"},
				   {5, "closereq"}, {6, "close"}, {7, "reset"}, {8, "sync"}, {9, "syncack"}};
constexpr Symbol kMhType[] = {
	{0, "binding-refresh-request"}, {1, "home-test-init"}, {2, "careof-test-init"}, {3, "home-test"},
	{4, "careof-test"}, {5, "binding-update"}, {6, "binding-acknowledgement"}, {7, "binding-error"},
	{8, "fast-binding-update"}, {9, "fast-binding-acknowledgement"}, {10, "fast-binding-advertisement"},
	{11, "experimental-mobility-header"}, {12, "home-agent-switch-message"}};
constexpr Symbol kArphrd[] = {{1, "ether"}, {512, "ppp"}, {768, "ipip"}, {769, "ipip6"}, {772, "loopback"},
			      {776, "sit"}, {778, "ipgre"}};
constexpr Symbol kCtState[] = {{1, "invalid"}, {8, "new"}, {2, "established"}, {4, "related"},
			       {64, "untracked"}};
constexpr Symbol kCtDir[] = {{0, "original"}, {1, "reply"}};
constexpr Symbol kCtStatus[] = {{1, "expected"}, {2, "seen-reply"}, {4, "assured"}, {8, "confirmed"},
				{16, "snat"}, {32, "dnat"}, {512, "dying"}};
constexpr Symbol kCtEvent[] = {{1, "new"}, {2, "related"}, {4, "destroy"}, {8, "reply"}, {16, "assured"},
			       {32, "protoinfo"}, {64, "helper"}, {128, "mark"}, {256, "seqadj"},
			       {512, "secmark"}, {1024, "label"}};
constexpr Symbol kPkttype[] = {{0, "host"}, {1, "broadcast"}, {2, "multicast"}, {3, "other"}};
constexpr Symbol kDscp[] = {
	{0x00, "cs0"}, {0x08, "cs1"}, {0x10, "cs2"}, {0x18, "cs3"}, {0x20, "cs4"}, {0x28, "cs5"}, {0x30, "cs6"},
	{0x38, "cs7"}, {0x01, "lephb"}, {0x0a, "af11"}, {0x0c, "af12"}, {0x0e, "af13"}, {0x12, "af21"},
	{0x14, "af22"}, {0x16, "af23"}, {0x1a, "af31"}, {0x1c, "af32"}, {0x1e, "af33"}, {0x22, "af41"},
	{0x24, "af42"}, {0x26, "af43"}, {0x2c, "va"}, {0x2e, "ef"}};
constexpr Symbol kEcn[] = {{0, "not-ect"}, {1, "ect1"}, {2, "ect0"}, {3, "ce"}};
constexpr Symbol kFibAddr[] = {{0, "unspec"}, {1, "unicast"}, {2, "local"}, {3, "broadcast"}, {4, "anycast"},
			       {5, "multicast"}, {6, "blackhole"}, {7, "unreachable"}, {8, "prohibit"}};
constexpr Symbol kBoolean[] = {{1, "exists"}, {0, "missing"}};
constexpr Symbol kDay[] = {{0, "Sunday"}, {1, "Monday"}, {2, "Tuesday"}, {3, "Wednesday"}, {4, "Thursday"},
			   {5, "Friday"}, {6, "Saturday"}};
// iproute2's files as Debian ships them (nft reads the node's /etc/iproute2): rt_realms
// and group name 0; rt_marks is empty.
constexpr Symbol kRealm[] = {{0, "cosmos"}};
constexpr Symbol kDevgroup[] = {{0, "default"}};
// netbase's /etc/protocols, for a node whose file the agent cannot read (its container).
constexpr Symbol kProtocols[] = {
	{0, "ip"}, {1, "icmp"}, {2, "igmp"}, {3, "ggp"}, {4, "ipencap"}, {5, "st"}, {6, "tcp"}, {8, "egp"},
	{9, "igp"}, {12, "pup"}, {17, "udp"}, {20, "hmp"}, {22, "xns-idp"}, {27, "rdp"}, {29, "iso-tp4"},
	{33, "dccp"}, {36, "xtp"}, {37, "ddp"}, {38, "idpr-cmtp"}, {41, "ipv6"}, {43, "ipv6-route"},
	{44, "ipv6-frag"}, {45, "idrp"}, {46, "rsvp"}, {47, "gre"}, {50, "esp"}, {51, "ah"}, {57, "skip"},
	{58, "ipv6-icmp"}, {59, "ipv6-nonxt"}, {60, "ipv6-opts"}, {73, "rspf"}, {81, "vmtp"}, {88, "eigrp"},
	{89, "ospf"}, {93, "ax.25"}, {94, "ipip"}, {97, "etherip"}, {98, "encap"}, {103, "pim"}, {108, "ipcomp"},
	{112, "vrrp"}, {115, "l2tp"}, {124, "isis"}, {132, "sctp"}, {133, "fc"}, {135, "mobility-header"},
	{136, "udplite"}, {137, "mpls-in-ip"}, {138, "manet"}, {139, "hip"}, {140, "shim6"}, {141, "wesp"},
	{142, "rohc"}, {143, "ethernet"}};

enum class Format : uint8_t { decimal, hex, hex1, hex2, hex4, hex8, custom };

struct TypeRow {
	TypeInfo info;
	Format format;
	Symbols symbols;
	bool quoted; // symbols print in quotes (mark, realm, devgroup, day)
};

constexpr ByteOrder kBig = ByteOrder::big, kHost = ByteOrder::host, kNone = ByteOrder::invalid;

// By Type's order.
const TypeRow kTypes[] = {
	{{"invalid", Type::invalid, kNone, 0, false}, Format::custom, {}, false},
	{{"verdict", Type::verdict, kNone, 0, false}, Format::custom, {}, false},
	{{"nf_proto", Type::integer, kNone, 8, false}, Format::decimal, kNfproto, false},
	{{"bitmask", Type::integer, kNone, 0, false}, Format::hex, {}, false},
	{{"integer", Type::integer, kNone, 0, false}, Format::decimal, {}, false},
	{{"string", Type::string, kHost, 0, false}, Format::custom, {}, false},
	{{"ll_addr", Type::lladdr, kBig, 0, false}, Format::custom, {}, false},
	{{"ipv4_addr", Type::integer, kBig, 32, true}, Format::custom, {}, false},
	{{"ipv6_addr", Type::integer, kBig, 128, true}, Format::custom, {}, false},
	{{"ether_addr", Type::lladdr, kBig, 48, false}, Format::custom, {}, false},
	{{"ether_type", Type::integer, kBig, 16, false}, Format::hex4, kEthertype, false},
	{{"arp_op", Type::integer, kBig, 16, false}, Format::decimal, kArpop, false},
	{{"inet_proto", Type::integer, kNone, 8, false}, Format::custom, {}, false},
	{{"inet_service", Type::integer, kBig, 16, false}, Format::decimal, {}, false},
	{{"icmp_type", Type::integer, kBig, 8, false}, Format::decimal, kIcmpType, false},
	{{"tcp_flag", Type::bitmask, kBig, 8, false}, Format::hex, kTcpFlag, false},
	{{"dccp_pkttype", Type::integer, kNone, 4, false}, Format::decimal, kDccpPkttype, false},
	{{"mh_type", Type::integer, kBig, 8, false}, Format::decimal, kMhType, false},
	{{"time", Type::integer, kHost, 32, false}, Format::custom, {}, false},
	{{"mark", Type::integer, kHost, 32, true}, Format::hex8, {}, true},
	{{"iface_index", Type::integer, kHost, 32, false}, Format::custom, {}, false},
	{{"iface_type", Type::integer, kHost, 16, false}, Format::decimal, kArphrd, false},
	{{"realm", Type::integer, kHost, 32, false}, Format::decimal, kRealm, true},
	{{"classid", Type::integer, kHost, 32, false}, Format::custom, {}, false},
	{{"uid", Type::integer, kHost, 32, false}, Format::decimal, {}, false},
	{{"gid", Type::integer, kHost, 32, false}, Format::decimal, {}, false},
	{{"ct_state", Type::bitmask, kHost, 32, false}, Format::hex, kCtState, false},
	{{"ct_dir", Type::integer, kNone, 8, false}, Format::decimal, kCtDir, false},
	{{"ct_status", Type::bitmask, kHost, 32, false}, Format::hex, kCtStatus, false},
	{{"icmpv6_type", Type::integer, kBig, 8, false}, Format::decimal, kIcmp6Type, false},
	{{"ct_label", Type::bitmask, kHost, 128, false}, Format::custom, {}, false},
	{{"pkt_type", Type::integer, kHost, 8, false}, Format::decimal, kPkttype, false},
	{{"icmp_code", Type::integer, kBig, 8, false}, Format::decimal, kIcmpCode, false},
	{{"icmpv6_code", Type::integer, kBig, 8, false}, Format::decimal, kIcmpv6Code, false},
	{{"icmpx_code", Type::integer, kBig, 8, false}, Format::decimal, kIcmpxCode, false},
	{{"devgroup", Type::integer, kHost, 32, true}, Format::decimal, kDevgroup, true},
	{{"dscp", Type::integer, kBig, 6, false}, Format::hex2, kDscp, false},
	{{"ecn", Type::integer, kBig, 2, false}, Format::hex1, kEcn, false},
	{{"fib_addrtype", Type::integer, kHost, 32, false}, Format::decimal, kFibAddr, false},
	{{"boolean", Type::integer, kNone, 1, false}, Format::decimal, kBoolean, false},
	{{"ct_event", Type::bitmask, kHost, 32, false}, Format::hex, kCtEvent, false},
	{{"ifname", Type::string, kHost, 128, false}, Format::custom, {}, false},
	{{"igmp_type", Type::integer, kBig, 8, false}, Format::decimal, kIgmpType, false},
	{{"time", Type::integer, kHost, 64, false}, Format::custom, {}, false},
	{{"hour", Type::integer, kHost, 32, false}, Format::custom, {}, false},
	{{"day", Type::integer, kHost, 8, false}, Format::decimal, kDay, true},
	{{"cgroupsv2", Type::integer, kHost, 64, false}, Format::decimal, {}, false},
	{{"integer", Type::integer, kNone, 0, false}, Format::hex, {}, false}, // xinteger
};
static_assert(std::size(kTypes) == size_t(Type::xinteger) + 1);

const TypeRow &row(Type type)
{
	return kTypes[static_cast<size_t>(type)];
}

std::string decimal(Wide v)
{
	if (v <= UINT64_MAX)
		return std::to_string(static_cast<uint64_t>(v));
	std::string out;
	for (; v; v /= 10)
		out.insert(out.begin(), char('0' + int(v % 10)));
	return out;
}

std::string hex(Wide v, int width)
{
	std::string digits;
	for (; v; v >>= 4)
		digits.insert(digits.begin(), "0123456789abcdef"[int(v & 0xf)]);
	if (digits.size() < size_t(std::max(width, 1)))
		digits.insert(0, size_t(std::max(width, 1)) - digits.size(), '0');
	return "0x" + digits;
}

std::string numberText(Format format, Wide v)
{
	switch (format) {
	case Format::hex: return hex(v, 1);
	case Format::hex1: return hex(v, 1);
	case Format::hex2: return hex(v, 2);
	case Format::hex4: return hex(v, 4);
	case Format::hex8: return hex(v, 8);
	case Format::decimal:
	case Format::custom: break;
	}
	return decimal(v);
}

// The bytes of `value` as `bits` wide, most significant first.
std::vector<uint8_t> bigEndian(Wide value, uint32_t bits)
{
	std::vector<uint8_t> out((bits + 7) / 8);
	for (size_t i = out.size(); i-- > 0; value >>= 8)
		out[i] = static_cast<uint8_t>(value & 0xff);
	return out;
}

std::string protocolName(uint8_t number)
{
	protoent entry, *found = nullptr;
	char buffer[1024];
	if (getprotobynumber_r(number, &entry, buffer, sizeof(buffer), &found) == 0 && found)
		return found->p_name;
	for (const Symbol &s : kProtocols)
		if (s.value == number)
			return s.name;
	return std::to_string(number);
}

std::string durationText(uint64_t ms)
{
	std::string out;
	for (const auto &[unit, suffix] : {std::pair<uint64_t, const char *>{86400000, "d"}, {3600000, "h"},
					   {60000, "m"}, {1000, "s"}, {1, "ms"}})
		if (ms >= unit) {
			out += fmt::format("{}{}", ms / unit, suffix);
			ms %= unit;
		}
	return out;
}

long localOffset(time_t at)
{
	tm local{};
	return localtime_r(&at, &local) ? local.tm_gmtoff : 0;
}

std::string customText(Type type, Wide v, uint32_t bits)
{
	switch (type) {
	case Type::ipaddr: {
		char text[INET_ADDRSTRLEN];
		const uint32_t be = htonl(static_cast<uint32_t>(v));
		return inet_ntop(AF_INET, &be, text, sizeof(text));
	}
	case Type::ip6addr: {
		char text[INET6_ADDRSTRLEN];
		const std::vector<uint8_t> b = bigEndian(v, 128);
		return inet_ntop(AF_INET6, b.data(), text, sizeof(text));
	}
	case Type::lladdr:
	case Type::etheraddr:
		return fmt::format("{:02x}", fmt::join(bigEndian(v, bits), ":"));
	case Type::inetProtocol: return protocolName(static_cast<uint8_t>(v));
	case Type::time: return durationText(static_cast<uint64_t>(v));
	case Type::ifindex: {
		char name[IF_NAMESIZE];
		if (if_indextoname(static_cast<unsigned>(v), name))
			return fmt::format("\"{}\"", name);
		return std::to_string(static_cast<int>(static_cast<uint32_t>(v)));
	}
	case Type::classid: {
		const auto h = static_cast<uint32_t>(v);
		return h == 0xffffffff ? "root" : h == 0 ? "none" : fmt::format("{:x}:{:x}", h >> 16, h & 0xffff);
	}
	case Type::ctLabel: { // the lowest label set (no connlabel.conf names it)
		unsigned bit = 0;
		while (bit < 128 && !((v >> bit) & 1))
			bit++;
		return std::to_string(bit < 128 ? bit : 0);
	}
	case Type::date: {
		time_t seconds = static_cast<time_t>(static_cast<uint64_t>(v) / 1000000000ull);
		seconds += localOffset(seconds);
		tm t{};
		char text[32];
		if (!gmtime_r(&seconds, &t) || !std::strftime(text, sizeof(text), "%Y-%m-%d %T", &t))
			return "Error converting timestamp to printed time";
		return fmt::format("\"{}\"", text);
	}
	case Type::hour: {
		auto seconds = static_cast<uint32_t>(v);
		seconds = static_cast<uint32_t>((seconds + localOffset(std::time(nullptr))) % 86400);
		std::string out = fmt::format("\"{:02}:{:02}", seconds / 3600, seconds / 60 % 60);
		return out + (seconds % 60 ? fmt::format(":{:02}", seconds % 60) : "") + "\"";
	}
	default: return fmt::format("{} [invalid type]", hex(v, 1));
	}
}

const Key kMetaKeys[] = { // by NFT_META_*
	{"length", Type::integer, kHost, 32, 4}, {"protocol", Type::ethertype, kBig, 16, 2},
	{"priority", Type::classid, kHost, 32, 4}, {"mark", Type::mark, kHost, 32, 4},
	{"iif", Type::ifindex, kHost, 32, 4}, {"oif", Type::ifindex, kHost, 32, 4},
	{"iifname", Type::ifname, kHost, 128, 16}, {"oifname", Type::ifname, kHost, 128, 16},
	{"iiftype", Type::arphrd, kHost, 16, 2}, {"oiftype", Type::arphrd, kHost, 16, 2},
	{"skuid", Type::uid, kHost, 32, 4}, {"skgid", Type::gid, kHost, 32, 4},
	{"nftrace", Type::integer, kHost, 1, 1}, {"rtclassid", Type::realm, kHost, 32, 4},
	{"secmark", Type::integer, kHost, 32, 4}, {"nfproto", Type::nfproto, kHost, 8, 1},
	{"l4proto", Type::inetProtocol, kHost, 8, 1}, {"ibrname", Type::ifname, kHost, 128, 16},
	{"obrname", Type::ifname, kHost, 128, 16}, {"pkttype", Type::pkttype, kHost, 8, 1},
	{"cpu", Type::integer, kHost, 32, 4}, {"iifgroup", Type::devgroup, kHost, 32, 4},
	{"oifgroup", Type::devgroup, kHost, 32, 4}, {"cgroup", Type::integer, kHost, 32, 4},
	{"random", Type::integer, kBig, 32, 4}, {"ipsec", Type::boolean, kHost, 8, 1},
	{"iifkind", Type::ifname, kHost, 128, 16}, {"oifkind", Type::ifname, kHost, 128, 16},
	{"ibrpvid", Type::integer, kHost, 16, 2}, {"ibrvproto", Type::ethertype, kBig, 16, 2},
	{"time", Type::date, kHost, 64, 8}, {"day", Type::day, kHost, 8, 1}, {"hour", Type::hour, kHost, 32, 4},
	{"sdif", Type::ifindex, kHost, 32, 4}, {"sdifname", Type::ifname, kHost, 128, 16},
};

const Key kCtKeys[] = { // by NFT_CT_*
	{"state", Type::ctState, kHost, 32, 4}, {"direction", Type::ctDir, kHost, 8, 1},
	{"status", Type::ctStatus, kHost, 32, 4}, {"mark", Type::mark, kHost, 32, 4},
	{"secmark", Type::integer, kHost, 32, 4}, {"expiration", Type::time, kHost, 32, 4},
	{"helper", Type::string, kHost, 128, 16}, {"l3proto", Type::nfproto, kHost, 8, 1},
	{"saddr", Type::invalid, kBig, 0, 16}, {"daddr", Type::invalid, kBig, 0, 16},
	{"protocol", Type::inetProtocol, kBig, 8, 1}, {"proto-src", Type::invalid, kBig, 16, 2},
	{"proto-dst", Type::invalid, kBig, 16, 2}, {"label", Type::ctLabel, kHost, 128, 16},
	{"packets", Type::integer, kHost, 64, 8}, {"bytes", Type::integer, kHost, 64, 8},
	{"avgpkt", Type::integer, kHost, 64, 8}, {"zone", Type::integer, kHost, 16, 2},
	{"event", Type::ctEvent, kHost, 32, 4}, {"ip saddr", Type::ipaddr, kBig, 32, 4},
	{"ip daddr", Type::ipaddr, kBig, 32, 4}, {"ip6 saddr", Type::ip6addr, kBig, 128, 16},
	{"ip6 daddr", Type::ip6addr, kBig, 128, 16}, {"id", Type::integer, kBig, 32, 4},
};

} // namespace

const TypeInfo &typeInfo(Type type)
{
	return row(type).info;
}

std::optional<Type> typeOfId(uint32_t id)
{
	if (id >= uint32_t(Type::xinteger) || id == uint32_t(Type::invalid))
		return std::nullopt;
	return static_cast<Type>(id);
}

Wide integerOf(std::span<const uint8_t> bytes, ByteOrder order)
{
	Wide v = 0;
	const size_t len = std::min<size_t>(bytes.size(), 16);
	for (size_t i = 0; i < len; i++)
		v = (v << 8) | (order == ByteOrder::host ? bytes[len - 1 - i] : bytes[i]);
	return v;
}

std::string integerText(Type type, Wide v, uint32_t bits, bool numeric)
{
	// Numeric (inside a range) leaves symbols and protocol names out; other printers stay.
	const TypeRow &r = row(type);
	for (const Symbol &s : r.symbols)
		if (!numeric && Wide(s.value) == v)
			return r.quoted ? fmt::format("\"{}\"", s.name) : s.name;
	if (numeric && type == Type::time) // nft's numeric time: whole seconds
		return fmt::format("{}s", static_cast<uint64_t>(v) / 1000);
	if (r.format == Format::custom && !(numeric && type == Type::inetProtocol))
		return customText(type, v, bits);
	const Type base = r.info.base;
	return numberText(r.format != Format::custom ? r.format : base == Type::bitmask ? Format::hex : Format::decimal, v);
}

Key metaKey(uint32_t key)
{
	return key < std::size(kMetaKeys) ? kMetaKeys[key] : Key{nullptr, Type::integer, kHost, 32, 16};
}

bool metaUnqualified(uint32_t key)
{
	static constexpr uint32_t kKeys[] = {4, 5, 6, 7, 21, 22}; // iif, oif, iifname, oifname, iifgroup, oifgroup
	return std::find(std::begin(kKeys), std::end(kKeys), key) != std::end(kKeys);
}

Key ctKey(uint32_t key, bool ipv4Table)
{
	if (key >= std::size(kCtKeys))
		return {nullptr, Type::integer, kHost, 32, 16};
	Key k = kCtKeys[key];
	if ((key == 8 || key == 9) && ipv4Table) // saddr, daddr: the table's family decides
		k.kernelLen = 4;
	return k;
}

Key rtKey(uint32_t key)
{
	static const Key kKeys[] = {{"classid", Type::realm, kHost, 32, 4}, {"nexthop", Type::ipaddr, kBig, 32, 4},
				    {"nexthop", Type::ip6addr, kBig, 128, 16}, {"mtu", Type::integer, kHost, 16, 2},
				    {"ipsec", Type::boolean, kHost, 8, 1}};
	return key < std::size(kKeys) ? kKeys[key] : Key{nullptr, Type::integer, kHost, 32, 16};
}

Key socketKey(uint32_t key)
{
	static const Key kKeys[] = {{"transparent", Type::integer, kHost, 8, 1}, {"mark", Type::mark, kHost, 32, 4},
				    {"wildcard", Type::integer, kHost, 8, 1}, {"cgroupv2", Type::cgroupv2, kHost, 64, 8}};
	return key < std::size(kKeys) ? kKeys[key] : Key{nullptr, Type::integer, kHost, 32, 16};
}

Key xfrmKey(uint32_t key)
{
	static const Key kKeys[] = {{nullptr, Type::integer, kHost, 32, 16}, {"daddr", Type::ipaddr, kBig, 32, 4},
				    {"daddr", Type::ip6addr, kBig, 128, 16}, {"saddr", Type::ipaddr, kBig, 32, 4},
				    {"saddr", Type::ip6addr, kBig, 128, 16}, {"reqid", Type::integer, kHost, 32, 4},
				    {"spi", Type::integer, kBig, 32, 4}};
	return key < std::size(kKeys) ? kKeys[key] : kKeys[0];
}

uint32_t fibLength(uint32_t result)
{
	return result == 2 ? IF_NAMESIZE : 4; // NFT_FIB_RESULT_OIFNAME
}

// ---- Protocol headers (proto.c's templates, in their order) ----

namespace {

using T = Type;
constexpr uint8_t kIcmpEcho = 1, kIcmpMtu = 2, kIcmpAddress = 3, kIcmp6Mtu = 4, kIcmp6Pptr = 5,
		  kIcmp6Echo = 6, kIcmp6Mgmq = 7;

constexpr Field kInetFields[] = {{"nfproto", T::nfproto, 0, 8, 0}};
constexpr Field kIpFields[] = {
	{"l4proto", T::inetProtocol, 0, 8, 0}, {"version", T::integer, 0, 4, 0}, {"hdrlength", T::integer, 4, 4, 0},
	{"dscp", T::dscp, 8, 6, 0}, {"ecn", T::ecn, 14, 2, 0}, {"length", T::integer, 16, 16, 0},
	{"id", T::integer, 32, 16, 0}, {"frag-off", T::integer, 48, 16, 0}, {"ttl", T::integer, 64, 8, 0},
	{"protocol", T::inetProtocol, 72, 8, 0}, {"checksum", T::integer, 80, 16, 0},
	{"saddr", T::ipaddr, 96, 32, 0}, {"daddr", T::ipaddr, 128, 32, 0}};
constexpr Field kIp6Fields[] = {
	{"l4proto", T::inetProtocol, 0, 8, 0}, {"version", T::integer, 0, 4, 0}, {"dscp", T::dscp, 4, 6, 0},
	{"ecn", T::ecn, 10, 2, 0}, {"flowlabel", T::integer, 12, 20, 0}, {"length", T::integer, 32, 16, 0},
	{"nexthdr", T::inetProtocol, 48, 8, 0}, {"hoplimit", T::integer, 56, 8, 0},
	{"saddr", T::ip6addr, 64, 128, 0}, {"daddr", T::ip6addr, 192, 128, 0}};
constexpr Field kIcmpFields[] = {
	{nullptr, T::invalid, 0, 0, 0}, {"type", T::icmpType, 0, 8, 0}, {"code", T::icmpCode, 8, 8, 0},
	{"checksum", T::integer, 16, 16, 0}, {"id", T::integer, 32, 16, kIcmpEcho},
	{"sequence", T::integer, 48, 16, kIcmpEcho}, {"gateway", T::integer, 32, 32, kIcmpAddress},
	{"mtu", T::integer, 48, 16, kIcmpMtu}};
constexpr Field kIcmp6Fields[] = {
	{nullptr, T::invalid, 0, 0, 0}, {"type", T::icmp6Type, 0, 8, 0}, {"code", T::icmpv6Code, 8, 8, 0},
	{"checksum", T::integer, 16, 16, 0}, {"parameter-problem", T::integer, 32, 32, kIcmp6Pptr},
	{"mtu", T::integer, 32, 32, kIcmp6Mtu}, {"id", T::integer, 32, 16, kIcmp6Echo},
	{"sequence", T::integer, 48, 16, kIcmp6Echo}, {"max-delay", T::integer, 32, 16, kIcmp6Mgmq}};
constexpr Field kIgmpFields[] = {{nullptr, T::invalid, 0, 0, 0}, {"type", T::igmpType, 0, 8, 0},
				 {"checksum", T::integer, 16, 16, 0}, {"mrt", T::integer, 8, 8, 0},
				 {"group", T::integer, 32, 32, 0}};
constexpr Field kUdpFields[] = {{nullptr, T::invalid, 0, 0, 0}, {"sport", T::inetService, 0, 16, 0},
				{"dport", T::inetService, 16, 16, 0}, {"length", T::integer, 32, 16, 0},
				{"checksum", T::integer, 48, 16, 0}};
constexpr Field kUdpliteFields[] = {{nullptr, T::invalid, 0, 0, 0}, {"sport", T::inetService, 0, 16, 0},
				    {"dport", T::inetService, 16, 16, 0}, {"csumcov", T::integer, 32, 16, 0},
				    {"checksum", T::integer, 48, 16, 0}};
constexpr Field kTcpFields[] = {
	{nullptr, T::invalid, 0, 0, 0}, {"sport", T::inetService, 0, 16, 0}, {"dport", T::inetService, 16, 16, 0},
	{"sequence", T::integer, 32, 32, 0}, {"ackseq", T::integer, 64, 32, 0}, {"doff", T::integer, 96, 4, 0},
	{"reserved", T::integer, 100, 4, 0}, {"flags", T::tcpFlag, 104, 8, 0}, {"window", T::integer, 112, 16, 0},
	{"checksum", T::integer, 128, 16, 0}, {"urgptr", T::integer, 144, 16, 0}};
constexpr Field kDccpFields[] = {{nullptr, T::invalid, 0, 0, 0}, {"sport", T::inetService, 0, 16, 0},
				 {"dport", T::inetService, 16, 16, 0}, {"type", T::dccpPkttype, 67, 4, 0}};
constexpr Field kSctpFields[] = {{nullptr, T::invalid, 0, 0, 0}, {"sport", T::inetService, 0, 16, 0},
				 {"dport", T::inetService, 16, 16, 0}, {"vtag", T::integer, 32, 32, 0},
				 {"checksum", T::integer, 64, 32, 0}};
constexpr Field kThFields[] = {{nullptr, T::invalid, 0, 0, 0}, {"sport", T::inetService, 0, 16, 0},
			       {"dport", T::inetService, 16, 16, 0}};
constexpr Field kAhFields[] = {{nullptr, T::invalid, 0, 0, 0}, {"nexthdr", T::inetProtocol, 0, 8, 0},
			       {"hdrlength", T::integer, 8, 8, 0}, {"reserved", T::integer, 16, 16, 0},
			       {"spi", T::integer, 32, 32, 0}, {"sequence", T::integer, 64, 32, 0}};
constexpr Field kEspFields[] = {{nullptr, T::invalid, 0, 0, 0}, {"spi", T::integer, 0, 32, 0},
				{"sequence", T::integer, 32, 32, 0}};
constexpr Field kCompFields[] = {{nullptr, T::invalid, 0, 0, 0}, {"nexthdr", T::inetProtocol, 0, 8, 0},
				 {"flags", T::bitmask, 8, 8, 0}, {"cpi", T::integer, 16, 16, 0}};
constexpr Field kEtherFields[] = {{nullptr, T::invalid, 0, 0, 0}, {"daddr", T::etheraddr, 0, 48, 0},
				  {"saddr", T::etheraddr, 48, 48, 0}, {"type", T::ethertype, 96, 16, 0}};
constexpr Field kVlanFields[] = {{nullptr, T::invalid, 0, 0, 0}, {"pcp", T::integer, 0, 3, 0},
				 {"dei", T::integer, 3, 1, 0}, {"cfi", T::integer, 3, 1, 0},
				 {"id", T::integer, 4, 12, 0}, {"type", T::ethertype, 16, 16, 0}};
constexpr Field kArpFields[] = {
	{nullptr, T::invalid, 0, 0, 0}, {"htype", T::integer, 0, 16, 0}, {"ptype", T::ethertype, 16, 16, 0},
	{"hlen", T::integer, 32, 8, 0}, {"plen", T::integer, 40, 8, 0}, {"operation", T::arpop, 48, 16, 0},
	{"saddr ether", T::etheraddr, 64, 48, 0}, {"saddr ip", T::ipaddr, 112, 32, 0},
	{"daddr ether", T::etheraddr, 144, 48, 0}, {"daddr ip", T::ipaddr, 192, 32, 0}};
constexpr Field kNoFields[] = {{"l4proto", T::inetProtocol, 0, 8, 0}};

using namespace protocols;
// The transports above ip, ip6, ah and comp (ip and ip6 list icmp, igmp, icmpv6 too).
constexpr ProtocolLink kAboveAuth[] = {{50, &esp}, {51, &ah}, {108, &comp}, {17, &udp}, {136, &udplite},
				       {6, &tcp}, {33, &dccp}, {132, &sctp}};
constexpr ProtocolLink kAboveIp[] = {{1, &icmp}, {2, &igmp}, {58, &icmp6}, {50, &esp}, {51, &ah},
				     {108, &comp}, {17, &udp}, {136, &udplite}, {6, &tcp}, {33, &dccp}, {132, &sctp}};
constexpr ProtocolLink kAboveIp6[] = {{50, &esp}, {51, &ah}, {108, &comp}, {17, &udp}, {136, &udplite},
				      {6, &tcp}, {33, &dccp}, {132, &sctp}, {1, &icmp}, {2, &igmp}, {58, &icmp6}};
constexpr ProtocolLink kAboveInet[] = {{2, &ip}, {10, &ip6}};
constexpr ProtocolLink kAboveEther[] = {{0x0800, &ip}, {0x0806, &arp}, {0x86dd, &ip6}, {0x8100, &vlan},
					{0x88a8, &vlan}};

} // namespace

namespace protocols {
const Protocol inet{"inet", Base::link, 0, 0, kInetFields, kAboveInet};
const Protocol ip{"ip", Base::network, 0, 0, kIpFields, kAboveIp};
const Protocol ip6{"ip6", Base::network, 0, 0, kIp6Fields, kAboveIp6};
const Protocol icmp{"icmp", Base::transport, 1, 0, kIcmpFields, {}};
const Protocol icmp6{"icmpv6", Base::transport, 1, 0, kIcmp6Fields, {}};
const Protocol igmp{"igmp", Base::transport, 0, 0, kIgmpFields, {}};
const Protocol tcp{"tcp", Base::transport, 0, 0, kTcpFields, {}};
const Protocol udp{"udp", Base::transport, 0, 0, kUdpFields, {}};
const Protocol udplite{"udplite", Base::transport, 0, 0, kUdpliteFields, {}};
const Protocol sctp{"sctp", Base::transport, 0, 0, kSctpFields, {}};
const Protocol dccp{"dccp", Base::transport, 0, 0, kDccpFields, {}};
const Protocol ah{"ah", Base::transport, 1, 0, kAhFields, kAboveAuth};
const Protocol esp{"esp", Base::transport, 0, 0, kEspFields, {}};
const Protocol comp{"comp", Base::transport, 1, 0, kCompFields, kAboveAuth};
const Protocol th{"th", Base::transport, 0, 0, kThFields, {}};
const Protocol ether{"ether", Base::link, 3, 112, kEtherFields, kAboveEther};
const Protocol vlan{"vlan", Base::link, 5, 32, kVlanFields, kAboveEther};
const Protocol arp{"arp", Base::network, 0, 0, kArpFields, {}};
const Protocol inetService{"inet-service", Base::transport, 0, 0, kNoFields, kAboveIp6};
} // namespace protocols

const Protocol *Protocol::above(uint32_t number) const
{
	for (const ProtocolLink &link : upper)
		if (link.number == number)
			return link.protocol;
	return nullptr;
}

bool Protocol::isProtocolKey(size_t i) const
{
	// ip's and ip6's own protocol fields count too (nft's proto_key_is_protocol).
	return (protocolKey != 0 && i == protocolKey) || (this == &protocols::ip && i == 9) ||
	       (this == &protocols::ip6 && i == 6);
}

// ---- Extension headers, options and chunks (exthdr.c, tcpopt.c, ipopt.c, sctp_chunk.c) ----

namespace {

constexpr Field kNexthdrLength[] = {{"nexthdr", T::inetProtocol, 0, 8, 0}, {"hdrlength", T::integer, 8, 8, 0}};
constexpr Field kRt[] = {{"nexthdr", T::inetProtocol, 0, 8, 0}, {"hdrlength", T::integer, 8, 8, 0},
			 {"type", T::integer, 16, 8, 0}, {"seg-left", T::integer, 24, 8, 0}};
constexpr Field kSrh[] = {{"last-entry", T::integer, 32, 8, 0}, {"flags", T::integer, 40, 8, 0},
			  {"tag", T::integer, 48, 16, 0}, {"sid[1]", T::ip6addr, 64, 128, 0},
			  {"sid[2]", T::ip6addr, 192, 128, 0}};
constexpr Field kRt0[] = {{"reserved", T::integer, 32, 32, 0}, {"addr[1]", T::ip6addr, 64, 128, 0},
			  {"addr[2]", T::ip6addr, 192, 128, 0}};
constexpr Field kFrag[] = {{"nexthdr", T::inetProtocol, 0, 8, 0}, {"reserved", T::integer, 8, 8, 0},
			   {"frag-off", T::integer, 16, 13, 0}, {"reserved2", T::integer, 29, 2, 0},
			   {"more-fragments", T::integer, 31, 1, 0}, {"id", T::integer, 32, 32, 0}};
constexpr Field kMh[] = {{"nexthdr", T::inetProtocol, 0, 8, 0}, {"hdrlength", T::integer, 8, 8, 0},
			 {"type", T::mhType, 16, 8, 0}, {"reserved", T::integer, 24, 8, 0},
			 {"checksum", T::integer, 32, 16, 0}};
// The routing header's variants, tried in nft's order when rt has no field there.
constexpr ExthdrHeader kIpv6Headers[] = {{"hbh", 0, kNexthdrLength}, {"rt", 43, kRt}, {"srh", 43, kSrh},
					 {"rt0", 43, kRt0}, {"frag", 44, kFrag}, {"dst", 60, kNexthdrLength},
					 {"mh", 135, kMh}};

constexpr Field kKind[] = {{"kind", T::integer, 0, 8, 0}};
constexpr Field kKindLength[] = {{"kind", T::integer, 0, 8, 0}, {"length", T::integer, 8, 8, 0}};
constexpr Field kMaxseg[] = {{"kind", T::integer, 0, 8, 0}, {"length", T::integer, 8, 8, 0}, {"size", T::integer, 16, 16, 0}};
constexpr Field kWindow[] = {{"kind", T::integer, 0, 8, 0}, {"length", T::integer, 8, 8, 0}, {"count", T::integer, 16, 8, 0}};
constexpr Field kSack[] = {{"kind", T::integer, 0, 8, 0}, {"length", T::integer, 8, 8, 0},
			   {"left", T::integer, 16, 32, 0}, {"right", T::integer, 48, 32, 0},
			   {"left", T::integer, 80, 32, 0}, {"right", T::integer, 112, 32, 0},
			   {"left", T::integer, 144, 32, 0}, {"right", T::integer, 176, 32, 0},
			   {"left", T::integer, 208, 32, 0}, {"right", T::integer, 240, 32, 0}};
constexpr Field kTimestamp[] = {{"kind", T::integer, 0, 8, 0}, {"length", T::integer, 8, 8, 0},
				{"tsval", T::integer, 16, 32, 0}, {"tsecr", T::integer, 48, 32, 0}};
constexpr Field kMptcp[] = {{"kind", T::integer, 0, 8, 0}, {"length", T::integer, 8, 8, 0}, {"subtype", T::integer, 16, 4, 0}};
constexpr ExthdrHeader kTcpOptions[] = {
	{"eol", 0, kKind}, {"nop", 1, kKind}, {"maxseg", 2, kMaxseg}, {"window", 3, kWindow},
	{"sack-perm", 4, kKindLength}, {"sack", 5, kSack}, {"timestamp", 8, kTimestamp},
	{"md5sig", 19, kKindLength}, {"mptcp", 30, kMptcp}, {"fastopen", 34, kKindLength}};

constexpr Field kRoute[] = {{"type", T::integer, 0, 8, 0}, {"length", T::integer, 8, 8, 0},
			    {"ptr", T::integer, 16, 8, 0}, {"addr", T::integer, 24, 32, 0}};
constexpr Field kRouterAlert[] = {{"type", T::integer, 0, 8, 0}, {"length", T::integer, 8, 8, 0},
				  {"value", T::integer, 16, 16, 0}};
constexpr ExthdrHeader kIpOptions[] = {{"lsrr", 131, kRoute}, {"rr", 7, kRoute}, {"ssrr", 137, kRoute},
				       {"ra", 148, kRouterAlert}};

constexpr Field kChunk[] = {{"type", T::integer, 0, 8, 0}, {"flags", T::integer, 8, 8, 0}, {"length", T::integer, 16, 16, 0}};
#define IPMASQ_CHUNK(...) {"type", T::integer, 0, 8, 0}, {"flags", T::integer, 8, 8, 0}, {"length", T::integer, 16, 16, 0}, __VA_ARGS__
constexpr Field kData[] = {IPMASQ_CHUNK({"tsn", T::integer, 32, 32, 0}, {"stream", T::integer, 64, 16, 0},
					{"ssn", T::integer, 80, 16, 0}, {"ppid", T::integer, 96, 32, 0})};
constexpr Field kInit[] = {IPMASQ_CHUNK({"init-tag", T::integer, 32, 32, 0}, {"a-rwnd", T::integer, 64, 32, 0},
					{"num-outbound-streams", T::integer, 96, 16, 0},
					{"num-inbound-streams", T::integer, 112, 16, 0}, {"initial-tsn", T::integer, 128, 32, 0})};
constexpr Field kSackChunk[] = {IPMASQ_CHUNK({"cum-tsn-ack", T::integer, 32, 32, 0}, {"a-rwnd", T::integer, 64, 32, 0},
					     {"num-gap-ack-blocks", T::integer, 96, 16, 0},
					     {"num-dup-tsns", T::integer, 112, 16, 0})};
constexpr Field kCumTsn[] = {IPMASQ_CHUNK({"cum-tsn-ack", T::integer, 32, 32, 0})};
constexpr Field kLowestTsn[] = {IPMASQ_CHUNK({"lowest-tsn", T::integer, 32, 32, 0})};
constexpr Field kSeqno[] = {IPMASQ_CHUNK({"seqno", T::integer, 32, 32, 0})};
constexpr Field kNewCumTsn[] = {IPMASQ_CHUNK({"new-cum-tsn", T::integer, 32, 32, 0})};
#undef IPMASQ_CHUNK
constexpr ExthdrHeader kSctpChunks[] = {
	{"data", 0, kData}, {"init", 1, kInit}, {"init-ack", 2, kInit}, {"sack", 3, kSackChunk},
	{"heartbeat", 4, kChunk}, {"heartbeat-ack", 5, kChunk}, {"abort", 6, kChunk}, {"shutdown", 7, kCumTsn},
	{"shutdown-ack", 8, kChunk}, {"error", 9, kChunk}, {"cookie-echo", 10, kChunk}, {"cookie-ack", 11, kChunk},
	{"ecne", 12, kLowestTsn}, {"cwr", 13, kLowestTsn}, {"shutdown-complete", 14, kChunk},
	{"asconf-ack", 128, kSeqno}, {"forward-tsn", 192, kNewCumTsn}, {"asconf", 193, kSeqno}};

} // namespace

std::span<const ExthdrHeader> exthdrHeaders(uint32_t op, uint8_t type)
{
	std::span<const ExthdrHeader> all;
	switch (op) {
	case NFT_EXTHDR_OP_IPV6: all = kIpv6Headers; break;
	case NFT_EXTHDR_OP_TCPOPT: all = kTcpOptions; break;
	case NFT_EXTHDR_OP_IPV4: all = kIpOptions; break;
	case NFT_EXTHDR_OP_SCTP: all = kSctpChunks; break;
	default: return {};
	}
	const auto first = std::find_if(all.begin(), all.end(), [type](const ExthdrHeader &h) { return h.type == type; });
	const auto last = std::find_if(first, all.end(), [type](const ExthdrHeader &h) { return h.type != type; });
	return {first, last};
}

uint8_t icmpTypeOf(uint8_t dependency)
{
	static constexpr uint8_t kTypes[] = {0, 8, 3, 5, 2, 4, 128, 130};
	return dependency < std::size(kTypes) ? kTypes[dependency] : 0;
}

} // namespace ipmasq::nft
