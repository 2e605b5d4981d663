// SPDX-License-Identifier: Apache-2.0
// The HTTP endpoint with Boost.Beast: one I/O thread, a bounded table of sessions with short
// deadlines, the oldest waiting one evicted for a new one.
#include "ip-masq-agent/daemon/health_server.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <sys/resource.h>
#include <unistd.h>
#include <functional>
#include <list>
#include <optional>
#include <thread>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <fmt/format.h>

#include "ip-masq-agent/base/ascii.h"
#include "ip-masq-agent/base/escape.h"
#include "ip-masq-agent/base/log.h"
#include "ip-masq-agent/base/process_guard.h"

namespace ipmasq {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

Result<ListenAddress> parseListenAddress(std::string_view text)
{
	const auto invalid = [&](std::string_view why) {
		return fail(fmt::format("--health-addr {}: {} (write host:port, :port or "
					"[ipv6]:port, e.g. \"{}\"; an empty value turns it off)",
					quoted(text), why, kDefaultHealthAddr));
	};
	const size_t colon = text.rfind(':');
	if (colon == std::string_view::npos)
		return invalid("no port");
	std::string_view host = text.substr(0, colon);
	if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
		host = host.substr(1, host.size() - 2);
	else if (host.find(':') != std::string_view::npos)
		return invalid("an IPv6 address needs brackets");

	const std::optional<uint64_t> port = ascii::parseDecimal(text.substr(colon + 1));
	if (!port || *port > 65535)
		return invalid("the port is not a number from 0 to 65535");
	if (host.find('\0') != std::string_view::npos)
		return invalid("the host holds a NUL byte");
	ListenAddress address{std::string(host), static_cast<uint16_t>(*port)};
	if (!address.host.empty()) {
		boost::system::error_code error;
		asio::ip::make_address(address.host, error);
		if (error)
			return invalid(fmt::format("{} is not an IP address", quoted(address.host)));
	}
	return address;
}

namespace {

// A probe or a scrape sends its whole request at once; a client that has not within this
// time (an idle connection, a slowloris dribbling bytes) is closed.
constexpr auto kRequestDeadline = std::chrono::seconds(2);
// Writing the answer (a few KB that fit the socket's buffer) to a client that reads it.
constexpr auto kWriteDeadline = std::chrono::seconds(2);
// A request is a line and a few headers: anything beyond these is refused unread.
constexpr uint32_t kHeaderLimit = 8 * 1024;
constexpr uint64_t kBodyLimit = 1024;
constexpr size_t kReadBufferLimit = 16 * 1024;
// After a failure of the endpoint itself (out of memory, a Boost error): a pause, so that a
// persistent one cannot make the thread spin.
constexpr auto kFailurePause = std::chrono::milliseconds(100);
// The endpoint thread's nice value: below the loop's (0), see yieldToTheLoop().
constexpr int kThreadNice = 10;
// One line about dropped connections per this period, however many there are.
constexpr auto kPressureLogPeriod = std::chrono::seconds(60);

class Session;

// The open sessions, oldest first, and the cap on them. Only the I/O thread touches it.
struct SessionTable {
	std::list<Session *> open;
	size_t capacity = HealthServer::kMaxSessions;
	std::optional<std::chrono::steady_clock::time_point> lastPressureLog;

	// Closes the oldest idle session: no request read, and no byte of one waiting in its
	// socket (a probe has sent its request at once, an idle flood has not); failing that,
	// the oldest whose request is not read, then the oldest. False when there is none.
	bool evictOne();
	// Logs "the health endpoint <why()>: ..." at most once per kPressureLogPeriod; `why`
	// is only called then (a flood evicts thousands of sessions a second).
	void notePressure(const std::function<std::string()> &why);
};

// One request per connection: probes and scrapes are small and infrequent.
class Session : public std::enable_shared_from_this<Session>
{
public:
	Session(tcp::socket socket, const AgentStatus &status, SessionTable &table)
		: stream_(std::move(socket)), buffer_(kReadBufferLimit), status_(status), table_(table)
	{
		parser_.header_limit(kHeaderLimit);
		parser_.body_limit(kBodyLimit);
		parser_.eager(true); // the body too, as far as the bytes go
		entry_ = table_.open.insert(table_.open.end(), this);
	}
	~Session() { forget(); }
	Session(const Session &) = delete;
	Session &operator=(const Session &) = delete;

	void start()
	{
		// The request must be whole kRequestDeadline after the accept, however slowly its
		// bytes come.
		deadline_.expires_after(kRequestDeadline);
		deadline_.async_wait([self = shared_from_this()](beast::error_code ec) {
			if (!ec && !self->requestRead_)
				self->close();
		});
		beast::error_code ec;
		stream_.socket().non_blocking(true, ec);
		if (ec)
			return close();
		readRequest();
	}

	// Parses what has come, and waits for more without taking it: bytes not parsed yet
	// stay in the socket, where idle() sees them. A probe's whole request is read and
	// parsed in one step, so no flood admitted meanwhile can take it for a client that
	// has sent nothing; under a flood its request is usually waiting at the accept.
	void readRequest()
	{
		beast::error_code ec;
		parseWaiting(ec);
		if (!ec)
			return respond();
		if (ec != http::error::need_more)
			return close(); // the client left, or its request is malformed or too large
		stream_.socket().async_wait(tcp::socket::wait_read,
					    [self = shared_from_this()](beast::error_code waited) {
						    if (!waited)
							    self->readRequest();
					    });
	}

	// Reads what the socket holds now, without waiting, and parses it: success once the
	// request is whole, need_more before.
	void parseWaiting(beast::error_code &ec)
	{
		tcp::socket &socket = stream_.socket();
		const size_t waiting = socket.available(ec);
		if (ec)
			return;
		// At least a byte, to learn of an end of stream; the parser's limits end a
		// request long before the buffer's.
		const size_t room = buffer_.max_size() - buffer_.size();
		const size_t got = socket.read_some(buffer_.prepare(std::clamp<size_t>(waiting, 1, room)), ec);
		if (ec && ec != asio::error::would_block)
			return;
		buffer_.commit(ec ? 0 : got);
		ec = {};
		while (buffer_.size() > 0 && !parser_.is_done()) {
			const size_t used = parser_.put(buffer_.data(), ec);
			buffer_.consume(used);
			if (ec || used == 0)
				break;
		}
		if (!ec && !parser_.is_done())
			ec = http::error::need_more;
	}

	bool requestRead() const { return requestRead_; }
	// Idle: no request read, and none of one waiting in the socket. Bytes stay there until
	// they are parsed (readRequest), so a probe whose request arrived while this thread
	// was busy admitting a flood is not idle.
	bool idle()
	{
		beast::error_code ec;
		return !requestRead_ && stream_.socket().available(ec) == 0 && !ec;
	}

	// Evicted: the descriptor is released now; the pending handlers end with
	// operation_aborted and release the session.
	void close()
	{
		forget();
		deadline_.cancel();
		stream_.close();
	}

private:
	void forget()
	{
		if (entry_)
			table_.open.erase(*std::exchange(entry_, std::nullopt));
	}

	// 200 "ok", or 503 with the reason.
	void answerHealth(const AgentStatus::Health &health)
	{
		response_.result(health.ok ? http::status::ok : http::status::service_unavailable);
		response_.body() = health.ok ? "ok\n" : health.reason + "\n";
	}

	// The health answer; with ?verbose, one "warning: ..." line per finding that does
	// not make the agent unready (another table's rule that undoes a decision).
	void answerReadiness(std::string_view query)
	{
		const AgentStatus::Snapshot snapshot = status_.snapshot();
		answerHealth(snapshot.health());
		if (!isVerbose(query))
			return;
		for (const std::string &warning : snapshot.verboseWarnings())
			response_.body() += "warning: " + warning + "\n";
		for (const std::string &line : snapshot.verboseInfo())
			response_.body() += "info: " + line + "\n";
	}

	// "?verbose", "?verbose=1", "?x=y&verbose": as Kubernetes' /readyz reads it.
	static bool isVerbose(std::string_view query)
	{
		if (query.empty())
			return false;
		query.remove_prefix(1);
		while (!query.empty()) {
			const std::string_view item = query.substr(0, query.find('&'));
			const std::string_view key = item.substr(0, item.find('='));
			if (key == "verbose")
				return item != "verbose=0" && item != "verbose=false";
			query.remove_prefix(std::min(query.size(), item.size() + 1));
		}
		return false;
	}

	void respond()
	{
		requestRead_ = true;
		deadline_.cancel();
		const auto &request = parser_.get();
		response_.version(request.version());
		response_.keep_alive(false);
		response_.set(http::field::server, "ip-masq-agent");
		response_.set(http::field::content_type, "text/plain; charset=utf-8");
		const bool get = request.method() == http::verb::get;
		const bool head = request.method() == http::verb::head;
		const std::string_view target(request.target().data(), request.target().size());
		const std::string_view path = target.substr(0, target.find('?'));
		if (!get && !head) {
			response_.result(http::status::method_not_allowed);
			response_.set(http::field::allow, "GET, HEAD");
			response_.body() = "only GET and HEAD\n";
		} else if (path == "/livez") {
			// Only the heartbeat's atomic: never waits for the loop, which is what it
			// judges.
			answerHealth(status_.liveness(AgentStatus::Clock::now()));
		} else if (path == "/readyz" || path == "/healthz") {
			// /healthz is /readyz under its old name, for existing scripts.
			answerReadiness(target.substr(path.size()));
		} else if (path == "/snat-usage") {
			// The same table as --snat-usage, from the last read (never a read of its own).
			response_.result(http::status::ok);
			response_.body() = status_.snapshot().snatUsageText();
		} else if (path == "/metrics") {
			response_.result(http::status::ok);
			response_.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
			response_.body() = status_.prometheusText();
		} else {
			response_.result(http::status::not_found);
			response_.body() = "not found: try /livez, /readyz, /healthz, /metrics or /snat-usage\n";
		}
		response_.prepare_payload();
		if (head)
			response_.body().clear(); // Content-Length stays that of the GET body
		stream_.expires_after(kWriteDeadline);
		http::async_write(stream_, response_,
				  [self = shared_from_this()](beast::error_code, size_t) {
					  beast::error_code ignored;
					  self->stream_.socket().shutdown(tcp::socket::shutdown_send,
									 ignored);
				  });
	}

	beast::tcp_stream stream_;
	asio::steady_timer deadline_{stream_.get_executor()}; // the request's
	beast::flat_buffer buffer_;
	http::request_parser<http::string_body> parser_;
	http::response<http::string_body> response_;
	const AgentStatus &status_;
	SessionTable &table_;
	std::optional<std::list<Session *>::iterator> entry_; // while open
	bool requestRead_ = false;
};

bool SessionTable::evictOne()
{
	if (open.empty())
		return false;
	const auto idle = std::find_if(open.begin(), open.end(), [](Session *s) { return s->idle(); });
	const auto waiting = std::find_if(open.begin(), open.end(),
					  [](const Session *s) { return !s->requestRead(); });
	(idle != open.end() ? *idle : waiting != open.end() ? *waiting : open.front())->close();
	return true;
}

void SessionTable::notePressure(const std::function<std::string()> &why)
{
	const auto now = std::chrono::steady_clock::now();
	if (lastPressureLog && now - *lastPressureLog < kPressureLogPeriod)
		return;
	lastPressureLog = now;
	log::warning("the health endpoint {}: the oldest connections that have not sent a request "
		     "are closed to admit new ones, so probes still get through (is a client holding "
		     "connections open? at most one line per {} s)",
		     why(), std::chrono::duration_cast<std::chrono::seconds>(kPressureLogPeriod).count());
}

} // namespace

struct HealthServer::Impl {
	Impl(const AgentStatus &s) : status(s) {}

	void accept()
	{
		accepting = true;
		acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
			accepting = false;
			if (ec == asio::error::operation_aborted)
				return;
			if (ec)
				return acceptFailed(ec);
			admit(std::move(socket));
			accept();
		});
	}

	void admit(tcp::socket socket)
	{
		// Under pressure the oldest waiting client goes, never the newest: a flood then
		// evicts itself, and a probe, which sends its request at once, is answered
		// within milliseconds.
		if (sessions.open.size() >= sessions.capacity) {
			sessions.notePressure([this] {
				return fmt::format("holds its limit of {} connections", sessions.capacity);
			});
			sessions.evictOne();
		}
		try {
			std::make_shared<Session>(std::move(socket), status, sessions)->start();
		} catch (const std::exception &e) {
			// Out of memory, most likely: this connection is closed, the next is tried.
			failed(e.what());
		}
	}

	void acceptFailed(const beast::error_code &ec)
	{
		// Out of descriptors: a session waiting for its request gives its place at once.
		// Out of anything else, or nothing left to close: try again shortly, never spin.
		const bool descriptors = ec == asio::error::no_descriptors ||
			ec == boost::system::errc::too_many_files_open_in_system;
		if (descriptors && sessions.evictOne()) {
			sessions.notePressure(
				[&ec] { return fmt::format("ran out of descriptors ({})", ec.message()); });
			return accept();
		}
		failed(fmt::format("cannot accept a connection: {}", ec.message()));
		retry.expires_after(kFailurePause);
		retry.async_wait([this](beast::error_code waited) {
			if (!waited)
				accept();
		});
	}

	// The endpoint's own failures are logged, once per distinct message, and it goes on.
	void failed(const std::string &why)
	{
		if (failure.changed(why))
			log::error("the health endpoint: {}; it goes on serving", why);
	}

	// The I/O thread. Nothing may throw across its edge (that would end the process):
	// an exception from a handler is logged, that handler's connection is gone, and
	// serving resumes.
	void serve()
	{
		yieldToTheLoop();
		for (;;) {
			try {
				io.run();
				return; // stopped
			} catch (const std::exception &e) {
				failed(e.what());
			} catch (...) {
				failed("an unknown exception");
			}
			if (stopping)
				return;
			std::this_thread::sleep_for(kFailurePause);
			// The handler that threw may have been the one that accepts.
			asio::post(io, [this] {
				if (!accepting && !retryPending())
					accept();
			});
		}
	}

	// The daemon's loop (healing, config changes) goes first when both threads want the
	// CPU: a flood keeps this thread busy evicting, and must not make a restore late.
	// A probe needs a millisecond of CPU, which it still gets. Per-thread nice value.
	static void yieldToTheLoop()
	{
		if (setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), kThreadNice) != 0)
			log::debug("cannot lower the health endpoint thread's priority: {}",
				   std::strerror(errno));
	}

	bool retryPending() const { return retry.expiry() > asio::steady_timer::clock_type::now(); }

	const AgentStatus &status;
	uint16_t port = 0; // the bound port, recorded before the I/O thread starts
	// Declared before the io_context: the sessions its handlers hold unregister from it
	// when the io_context is destroyed.
	SessionTable sessions;
	LogOnce failure;
	bool accepting = false;
	std::atomic<bool> stopping{false};
	asio::io_context io{1};
	tcp::acceptor acceptor{io};
	asio::steady_timer retry{io};
	std::thread thread;
};

size_t HealthServer::sessionCapacity(size_t freeDescriptors)
{
	const size_t spare = freeDescriptors > kReservedDescriptors ? freeDescriptors - kReservedDescriptors : 0;
	return std::clamp(spare, kMinSessions, kMaxSessions);
}

namespace {

// ":port" means every address: IPv6 and IPv4 on one dual-stack socket where the node
// has IPv6 (the kubelet probes an IPv6-only node on its IPv6 address), IPv4 otherwise.
boost::system::error_code openAndBind(tcp::acceptor &acceptor, const ListenAddress &address)
{
	boost::system::error_code ec;
	const auto bindTo = [&](const asio::ip::address &ip, bool dualStack) {
		ec.clear();
		const tcp::endpoint endpoint(ip, address.port);
		acceptor.open(endpoint.protocol(), ec);
		if (!ec && dualStack)
			acceptor.set_option(asio::ip::v6_only(false), ec);
		if (!ec)
			acceptor.set_option(asio::socket_base::reuse_address(true), ec);
		if (!ec)
			acceptor.bind(endpoint, ec);
		if (!ec)
			acceptor.listen(asio::socket_base::max_listen_connections, ec);
		if (ec && acceptor.is_open()) {
			boost::system::error_code ignored;
			acceptor.close(ignored);
		}
	};
	if (!address.host.empty()) {
		bindTo(asio::ip::make_address(address.host), false);
		return ec;
	}
	bindTo(asio::ip::address_v6::any(), true);
	if (ec == asio::error::address_family_not_supported ||
	    ec == boost::system::errc::address_not_available)
		bindTo(asio::ip::address_v4::any(), false);
	return ec;
}

} // namespace

Result<std::unique_ptr<HealthServer>> HealthServer::start(const ListenAddress &address,
							  const AgentStatus &status)
{
	// Boost reports what it cannot do (no descriptor for its epoll, no memory, no thread)
	// with exceptions: here they are start-up errors with a message.
	try {
		return startOrThrow(address, status);
	} catch (const std::exception &e) {
		return fail(fmt::format("cannot start the health endpoint (/livez, /readyz, /healthz, "
					"/metrics): {} (check the open-files and memory limits, or turn "
					"it off with --health-addr=)", e.what()));
	}
}

Result<std::unique_ptr<HealthServer>> HealthServer::startOrThrow(const ListenAddress &address,
								 const AgentStatus &status)
{
	auto impl = std::make_unique<Impl>(status);
	if (const auto ec = openAndBind(impl->acceptor, address))
		return fail(fmt::format("cannot serve /healthz, /livez, /readyz and /metrics on {}:{}: "
					"{} (choose another --health-addr, or turn it off with "
					"--health-addr=)",
					address.host.empty() ? "*" : address.host, address.port,
					ec.message()), ec.value());
	// Read here, once: from now on only the I/O thread touches the acceptor.
	boost::system::error_code ec;
	impl->port = impl->acceptor.local_endpoint(ec).port();
	if (ec)
		return fail(fmt::format("cannot tell the health endpoint's port: {}", ec.message()),
			    ec.value());
	// Everything else of the daemon is open by now: the sessions take what is left,
	// less a reserve for the config reads.
	impl->sessions.capacity = sessionCapacity(process::descriptorRoom().free());
	log::debug("the health endpoint serves at most {} connections at a time",
		   impl->sessions.capacity);
	impl->accept();
	Impl *raw = impl.get();
	// Refused (a limit on tasks), the endpoint is not served: an error at start that names
	// the limit, as for a port that cannot be bound (probes would fail without saying why).
	auto thread = process::startThread("the health endpoint (/livez, /readyz, /healthz, /metrics)",
					   [raw] { raw->serve(); });
	if (!thread)
		return fail(fmt::format("{}; or turn the endpoint off with --health-addr=",
					thread.error().message), thread.error().errnum);
	impl->thread = std::move(*thread);
	return std::unique_ptr<HealthServer>(new HealthServer(std::move(impl)));
}

HealthServer::HealthServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HealthServer::~HealthServer()
{
	impl_->stopping = true;
	impl_->io.stop();
	if (impl_->thread.joinable())
		impl_->thread.join();
}

uint16_t HealthServer::port() const
{
	return impl_->port;
}

} // namespace ipmasq
