// SPDX-License-Identifier: Apache-2.0
// The netlink socket: requests, dumps, notifications and nf_tables batches over libmnl.
#include "ip-masq-agent/netlink/socket.h"

#include <cerrno>
#include <cstring>
#include <ctime>
#include <exception>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include <fmt/format.h>
#include <libnftnl/common.h>

#include "ip-masq-agent/base/log.h"

namespace ipmasq::netlink {

namespace {

// Large enough for any datagram the kernel sends us: dump skbs are at most 32 KiB,
// and acknowledgements are capped.
constexpr size_t kReceiveBufferSize = 64 * 1024 + 4096;

// The error of a call that just failed. Callers pass errno first and the message's parts
// unformatted: no argument allocates, so nothing changes errno before it is read.
template<typename... Args>
Error systemError(int errnum, fmt::format_string<Args...> what, Args &&...args)
{
	return Error(fmt::format("{}: {}", fmt::format(what, std::forward<Args>(args)...),
				 std::strerror(errnum)),
		     errnum);
}

// How messages name the socket, the kernel side answering it, and what interrupts a dump.
struct ProtocolWords {
	int netlinkFamily;
	const char *socket;
	const char *peer;
	const char *interruption;
};

const ProtocolWords &words(Protocol protocol)
{
	static const ProtocolWords netfilter{NETLINK_NETFILTER, "netfilter netlink socket",
					     "nf_tables", "ruleset"};
	static const ProtocolWords route{NETLINK_ROUTE, "route netlink socket", "rtnetlink",
					 "link or address"};
	return protocol == Protocol::route ? route : netfilter;
}

struct CallbackContext {
	const ReplyHandler *handler;
	std::optional<Error> error;
	std::exception_ptr exception = {}; // what the handler threw
};

// libmnl calls this for every data message. No exception may unwind through C, and
// nothing here allocates: out of memory, a handler's bad_alloc is only kept (taking
// the exception in flight costs no allocation), and looked at once libmnl has returned.
int dataCallback(const nlmsghdr *nlh, void *data) noexcept
{
	auto *context = static_cast<CallbackContext *>(data);
	try {
		if (Status s = (*context->handler)(nlh); !s) {
			context->error.emplace(std::move(s.error())); // moved: no allocation
			return MNL_CB_ERROR;
		}
		return MNL_CB_OK;
	} catch (...) {
		context->exception = std::current_exception();
	}
	return MNL_CB_ERROR;
}

// What a reply handler threw, as the exchange's error, once back from C. Out of memory the
// message may be the short one, which needs no allocation.
Error handlerFailure(const std::exception_ptr &exception)
{
	try {
		std::rethrow_exception(exception);
	} catch (const std::bad_alloc &) {
		try {
			return Error("out of memory while handling a netlink reply", ENOMEM);
		} catch (...) {
			return Error("out of memory", ENOMEM); // short enough to need no allocation
		}
	} catch (const std::exception &e) {
		return Error(fmt::format("handling a netlink reply: {}", e.what()));
	} catch (...) {
		return Error("handling a netlink reply: unknown exception");
	}
}

// The kernel's extended-ack text of an NLMSG_ERROR message, if any.
std::string extackMessage(const nlmsghdr *nlh)
{
	if (!(nlh->nlmsg_flags & NLM_F_ACK_TLVS))
		return {};
	const auto *err = static_cast<const nlmsgerr *>(mnl_nlmsg_get_payload(nlh));
	// Capped acks carry only the failed message's header; otherwise all of it.
	size_t offset = sizeof(nlmsgerr);
	if (!(nlh->nlmsg_flags & NLM_F_CAPPED))
		offset = sizeof(int) + err->msg.nlmsg_len;
	if (mnl_nlmsg_get_payload_len(nlh) <= offset)
		return {};
	const nlattr *attrs[NLMSGERR_ATTR_MAX + 1] = {};
	collectAttributes(nlh, offset, attrs, NLMSGERR_ATTR_MAX);
	const nlattr *message = attrs[NLMSGERR_ATTR_MSG];
	if (message && mnl_attr_validate(message, MNL_TYPE_NUL_STRING) >= 0)
		return static_cast<const char *>(mnl_attr_get_str(message));
	return {};
}

} // namespace

void collectAttributes(const void *begin, const void *end, const nlattr **table, uint16_t maxType)
{
	// libmnl's mnl_attr_for_each() relies on C's implicit void* conversion.
	const auto *last = static_cast<const char *>(end);
	for (auto *attr = static_cast<const nlattr *>(begin);
	     mnl_attr_ok(attr, static_cast<int>(last - reinterpret_cast<const char *>(attr)));
	     attr = mnl_attr_next(attr))
		if (mnl_attr_get_type(attr) <= maxType)
			table[mnl_attr_get_type(attr)] = attr;
}

void collectAttributes(const nlmsghdr *nlh, size_t headerSize, const nlattr **table, uint16_t maxType)
{
	collectAttributes(mnl_nlmsg_get_payload_offset(nlh, headerSize), mnl_nlmsg_get_payload_tail(nlh),
			  table, maxType);
}

Socket::Socket(Protocol protocol, MnlSocketPtr socket, uint32_t portId, uint32_t seq)
	: protocol_(protocol), socket_(std::move(socket)), portId_(portId), seq_(seq),
	  buffer_(kReceiveBufferSize)
{
}

Result<Socket> Socket::open(Protocol protocol)
{
	const ProtocolWords &w = words(protocol);
	MnlSocketPtr nl(mnl_socket_open2(w.netlinkFamily, SOCK_CLOEXEC));
	if (!nl)
		return fail(systemError(errno, "cannot open a {}", w.socket));
	if (mnl_socket_bind(nl.get(), 0, MNL_SOCKET_AUTOPID) < 0)
		return fail(systemError(errno, "cannot bind the {}", w.socket));
	// Both are optional (older kernels): errors then come without the kernel's text,
	// or with the failed message echoed, which the answer parsing handles too.
	int on = 1;
	mnl_socket_setsockopt(nl.get(), NETLINK_EXT_ACK, &on, sizeof(on));
	mnl_socket_setsockopt(nl.get(), NETLINK_CAP_ACK, &on, sizeof(on));
	const uint32_t portId = mnl_socket_get_portid(nl.get());
	// Start from the clock, as nft does, so that numbers differ between runs.
	Socket socket(protocol, std::move(nl), portId, static_cast<uint32_t>(std::time(nullptr)));
	if (auto s = socket.setReplyTimeout(kDefaultReplyTimeout); !s)
		return fail(s.error());
	return socket;
}

Status Socket::setReplyTimeout(std::chrono::milliseconds timeout)
{
	if (timeout <= std::chrono::milliseconds(0))
		return fail("a netlink reply timeout must be positive", EINVAL);
	const timeval value{static_cast<time_t>(timeout.count() / 1000),
			    static_cast<suseconds_t>(timeout.count() % 1000 * 1000)};
	// The receive timeout is the one that matters: nf_tables answers into our receive
	// queue. Sending to the kernel does not wait for buffer space today; the send
	// timeout bounds it should that ever change.
	for (const int option : {SO_RCVTIMEO, SO_SNDTIMEO})
		if (setsockopt(fd(), SOL_SOCKET, option, &value, sizeof(value)) != 0)
			return fail(systemError(errno, "cannot set the {}'s timeouts",
						words(protocol_).socket));
	replyTimeout_ = timeout;
	return {};
}

Error Socket::timedOut(const std::string &detail) const
{
	return Error(fmt::format("{} did not answer within {:g} s{}{}", words(protocol_).peer,
				 std::chrono::duration<double>(replyTimeout_).count(),
				 detail.empty() ? "" : ": ", detail),
		     ETIMEDOUT);
}

int Socket::fd() const
{
	return mnl_socket_get_fd(socket_.get());
}

Status Socket::growBuffer(int option, int forceOption, size_t bytes)
{
	int current = 0;
	socklen_t len = sizeof(current);
	// The kernel reports the doubled value it keeps for bookkeeping overhead.
	if (getsockopt(fd(), SOL_SOCKET, option, &current, &len) == 0 &&
	    static_cast<size_t>(current) / 2 >= bytes)
		return {};
	if (bytes > static_cast<size_t>(INT32_MAX / 2))
		return fail(fmt::format("a socket buffer of {} bytes is too large", bytes), ENOBUFS);
	const int value = static_cast<int>(bytes);
	if (setsockopt(fd(), SOL_SOCKET, forceOption, &value, sizeof(value)) == 0)
		return {};
	if (setsockopt(fd(), SOL_SOCKET, option, &value, sizeof(value)) == 0)
		return {};
	return fail(systemError(errno, "cannot size a netlink socket buffer to {} bytes", bytes));
}

Status Socket::reserveBuffers(size_t sendBytes, size_t receiveBytes)
{
	if (auto s = growBuffer(SO_SNDBUF, SO_SNDBUFFORCE, sendBytes); !s)
		return s;
	return growBuffer(SO_RCVBUF, SO_RCVBUFFORCE, receiveBytes);
}

Status Socket::joinGroup(unsigned group)
{
	int value = static_cast<int>(group);
	if (mnl_socket_setsockopt(socket_.get(), NETLINK_ADD_MEMBERSHIP, &value, sizeof(value)) < 0)
		return fail(systemError(errno, "cannot join netlink group {}", group));
	return {};
}

Status Socket::leaveGroup(unsigned group)
{
	int value = static_cast<int>(group);
	if (mnl_socket_setsockopt(socket_.get(), NETLINK_DROP_MEMBERSHIP, &value, sizeof(value)) < 0)
		return fail(systemError(errno, "cannot leave netlink group {}", group));
	return {};
}

void Socket::discardPending()
{
	for (;;) {
		const ssize_t n = recv(fd(), buffer_.data(), buffer_.size(), MSG_DONTWAIT);
		if (n > 0)
			continue;
		if (n < 0 && (errno == EINTR || errno == ENOBUFS))
			continue;
		return;
	}
}

Result<bool> Socket::receivePending(const std::function<void(const nlmsghdr *)> &onMessage)
{
	ssize_t n;
	do
		n = recv(fd(), buffer_.data(), buffer_.size(), MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return false;
		return fail(systemError(errno, "cannot receive from the {}", words(protocol_).socket));
	}
	int len = static_cast<int>(n);
	for (auto *nlh = reinterpret_cast<const nlmsghdr *>(buffer_.data()); mnl_nlmsg_ok(nlh, len);
	     nlh = mnl_nlmsg_next(nlh, &len))
		onMessage(nlh);
	return true;
}

Result<Drained> Socket::drainNotifications(const std::function<void(const nlmsghdr *)> &onMessage,
					   size_t maxDatagrams)
{
	Drained drained;
	drained.bounded = true;
	for (size_t read = 0; read < maxDatagrams; read++) {
		auto got = receivePending(onMessage);
		if (!got) {
			// The kernel reports dropped notifications once, on this receive.
			if (got.error().errnum != ENOBUFS)
				return fail(got.error());
			drained.overrun = true;
			continue;
		}
		if (!*got) {
			drained.bounded = false;
			break;
		}
	}
	return drained;
}

nlmsghdr *Socket::putHeader(char *buffer, uint16_t type, uint16_t family, uint16_t flags,
			    uint32_t seq) const
{
	if (protocol_ == Protocol::netfilter)
		return nftnl_nlmsg_build_hdr(buffer, type, family, flags, seq);
	nlmsghdr *nlh = mnl_nlmsg_put_header(buffer);
	nlh->nlmsg_type = type;
	nlh->nlmsg_flags = NLM_F_REQUEST | flags;
	nlh->nlmsg_seq = seq;
	auto *gen = static_cast<rtgenmsg *>(mnl_nlmsg_put_extra_header(nlh, sizeof(rtgenmsg)));
	gen->rtgen_family = static_cast<unsigned char>(family);
	return nlh;
}

void Socket::clearInterruptions(ssize_t length)
{
	int left = static_cast<int>(length);
	for (auto *nlh = reinterpret_cast<nlmsghdr *>(buffer_.data()); mnl_nlmsg_ok(nlh, left);
	     nlh = mnl_nlmsg_next(nlh, &left))
		nlh->nlmsg_flags &= static_cast<uint16_t>(~NLM_F_DUMP_INTR);
}

Status Socket::query(uint16_t type, uint16_t family, uint16_t flags, const RequestBuilder &build,
		     const ReplyHandler &onReply, uint8_t subsystem)
{
	discardPending();
	const uint32_t seq = seq_++;
	std::vector<char> request(MNL_SOCKET_BUFFER_SIZE);
	if (!(flags & NLM_F_DUMP))
		flags |= NLM_F_ACK;
	nlmsghdr *nlh = putHeader(request.data(), type, family, flags, seq);
	// libnftnl's header names nf_tables as the subsystem; another's request names its own.
	if (protocol_ == Protocol::netfilter)
		nlh->nlmsg_type = static_cast<uint16_t>(subsystem << 8 | type);
	if (build)
		build(nlh);
	if (mnl_socket_sendto(socket_.get(), nlh, nlh->nlmsg_len) < 0)
		return fail(systemError(errno, "cannot send a netlink request"));

	CallbackContext context{&onReply, std::nullopt};
	for (;;) {
		const ssize_t n =
			mnl_socket_recvfrom(socket_.get(), buffer_.data(), buffer_.size());
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) // SO_RCVTIMEO expired
				return fail(timedOut());
			return fail(systemError(errno, "cannot receive a netlink reply"));
		}
		// The kernel never mixes exchanges in one datagram. One that answers another
		// sequence number is late, for an exchange we gave up on: not ours to read.
		const auto *first = reinterpret_cast<const nlmsghdr *>(buffer_.data());
		if (static_cast<size_t>(n) >= sizeof(nlmsghdr) && first->nlmsg_seq != seq)
			continue;
		if (toleratesInterruptedDumps_)
			clearInterruptions(n);
		const int ret = mnl_cb_run(buffer_.data(), n, seq, portId_, dataCallback, &context);
		if (ret == MNL_CB_STOP)
			return {};
		if (ret == MNL_CB_ERROR) {
			if (context.exception)
				return fail(handlerFailure(context.exception));
			if (context.error)
				return fail(std::move(*context.error));
			const int err = errno;
			if (err == EINTR) // NLM_F_DUMP_INTR
				return fail(fmt::format("a concurrent {} change interrupted the dump",
							words(protocol_).interruption),
					    EINTR);
			return fail(std::strerror(err), err);
		}
	}
}

Result<BatchAnswer> Socket::sendBatch(const Batch &batch)
{
	discardPending();
	// An acknowledgement costs about 1 KiB of receive buffer (its skb), twice that
	// leaves room for the generation message and kernels with larger skbs.
	if (auto s = reserveBuffers(batch.bytes() + 4096, batch.acknowledgedMessages() * 2048 + 64 * 1024); !s)
		return fail(s.error());
	std::vector<iovec> iov = batch.iovecs();
	sockaddr_nl kernel{};
	kernel.nl_family = AF_NETLINK;
	msghdr msg{};
	msg.msg_name = &kernel;
	msg.msg_namelen = sizeof(kernel);
	msg.msg_iov = iov.data();
	msg.msg_iovlen = iov.size();
	ssize_t sent;
	do
		sent = sendmsg(fd(), &msg, 0);
	while (sent < 0 && errno == EINTR);
	if (sent < 0)
		return fail(systemError(errno, "cannot send a batch of {} bytes", batch.bytes()));
	seq_ = batch.nextSequence();
	return collectAnswers(batch);
}

namespace {

// The kernel's answers to one batch, message by message: acknowledgements and errors of
// its messages, and the generation its commit made.
struct AnswerCollector {
	uint32_t first; // the batch's sequence numbers: [first, first + count)
	uint32_t count;
	BatchAnswer answer = {};
	size_t answered = 0;

	bool ours(uint32_t seq) const { return seq - first < count; }

	void take(const nlmsghdr *nlh)
	{
		constexpr uint16_t kNewGenType = (NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN;
		if (nlh->nlmsg_type == kNewGenType && ours(nlh->nlmsg_seq)) {
			GenPtr gen = newGen();
			if (nftnl_gen_nlmsg_parse(nlh, gen.get()) >= 0 &&
			    nftnl_gen_is_set(gen.get(), NFTNL_GEN_ID))
				answer.generation = nftnl_gen_get_u32(gen.get(), NFTNL_GEN_ID);
			return;
		}
		if (nlh->nlmsg_type != NLMSG_ERROR || mnl_nlmsg_get_payload_len(nlh) < sizeof(nlmsgerr))
			return;
		const auto *err = static_cast<const nlmsgerr *>(mnl_nlmsg_get_payload(nlh));
		if (!ours(err->msg.nlmsg_seq))
			return; // left over from an earlier exchange
		answered++;
		if (err->error == 0)
			answer.acknowledged++;
		else
			answer.failures.push_back({err->msg.nlmsg_seq, -err->error, extackMessage(nlh)});
	}
};

} // namespace

Result<BatchAnswer> Socket::collectAnswers(const Batch &batch)
{
	const size_t expected = batch.acknowledgedMessages();
	AnswerCollector answers{batch.firstSequence(), batch.nextSequence() - batch.firstSequence()};
	bool waited = false;
	int ready = 1;
	while (ready > 0) {
		auto got = receivePending([&answers](const nlmsghdr *nlh) { answers.take(nlh); });
		if (!got && got.error().errnum == ENOBUFS)
			return fail("the kernel's answers to a batch overflowed the socket buffer, so "
				    "its outcome is unknown", ENOBUFS);
		if (!got)
			return fail(got.error());
		// Nothing pending: the kernel queues all answers before sendmsg() returns, so this
		// is the end unless something is missing; then wait once, in case a kernel ever
		// answers asynchronously.
		if (!*got && (answers.answered >= expected || !answers.answer.failures.empty() || waited))
			break;
		if (!*got) {
			pollfd pfd{fd(), POLLIN, 0};
			ready = poll(&pfd, 1, static_cast<int>(replyTimeout_.count()));
			waited = true;
		}
	}
	if (!answers.answer.failures.empty() || answers.answer.acknowledged >= expected)
		return std::move(answers.answer);
	const std::string what = fmt::format("the kernel acknowledged {} of {} messages of a batch, "
					     "so its outcome is unknown", answers.answer.acknowledged, expected);
	return ready == 0 ? fail(timedOut(what)) : fail(what, EPROTO);
}

namespace {
std::string gMonitorFaultPath; // set once, before the loop starts; read by the loop only
} // namespace

void failMonitorsWhileFileExists(std::string path)
{
	gMonitorFaultPath = std::move(path);
}

Status injectedMonitorFault()
{
	if (gMonitorFaultPath.empty() || access(gMonitorFaultPath.c_str(), F_OK) != 0)
		return {};
	return fail(fmt::format("an injected fault (IP_MASQ_AGENT_TEST_FAULT: {} exists)",
				gMonitorFaultPath), EIO);
}

} // namespace ipmasq::netlink
