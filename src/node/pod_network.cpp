// SPDX-License-Identifier: Apache-2.0
// The pod network's sources read into the discovered-range model, followed, kept across a
// restart and an edit of the section.
#include "ip-masq-agent/node/pod_network.h"

#include <sys/inotify.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "ip-masq-agent/node/cni_conf.h"
#include "ip-masq-agent/config/config.h"
#include "ip-masq-agent/node/flannel_subnet_env.h"
#include "ip-masq-agent/base/log.h"

namespace ipmasq {

namespace {

std::string directoryOf(const std::string &path)
{
	const size_t slash = path.rfind('/');
	return slash == 0 || slash == std::string::npos ? "/" : path.substr(0, slash);
}

RouteFilter routeFilter(const NonMasqueradeDiscovery &section, bool ipv6)
{
	return RouteFilter{section.routeProtocols, section.routeInterfaces, section.within, ipv6};
}

// The origin of a prefix kept from the agent's table, as /readyz?verbose lists it.
constexpr const char *kKeptOrigin = "in the agent's table when it started";

// A watched directory's own events, and those that say it went.
constexpr uint32_t kDirectoryEvents = IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE |
				      IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_MASK_ADD;
// A parent's, while a directory on the way is missing: its entries made, and its own going.
constexpr uint32_t kParentEvents = IN_CREATE | IN_MOVED_TO | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_MASK_ADD;

} // namespace

PodNetwork::PodNetwork(const NonMasqueradeDiscovery &section, bool ipv6, Clock::time_point now,
		       const RangesBySource *kept, RouteOpener openRoutes)
	: section_(section),
	  ipv6_(ipv6),
	  model_(DiscoveredRanges::Settings{section.within, section.holdDown, ipv6, kMaxDiscoveredPrefixes,
					    kept != nullptr}),
	  openRoutes_(std::move(openRoutes))
{
	if (kept)
		for (const DiscoverySource source : kAllDiscoverySources)
			model_.keep(source, kept->of(source), kKeptOrigin);
	if (section_.followsRoutes()) {
		model_.expect(DiscoverySource::routes, DiscoveredRanges::kRoutesInput);
		followRoutes(now);
	}
	if (section_.flannelSubnetEnv)
		model_.expect(DiscoverySource::flannel, section_.flannelSubnetEnv->path);
	allWatched_ = watchDirectories(); // first: a change during the read is not missed
	readFiles(now, "the first reading");
	// A source the section no longer names lets what the table held for it go (held down).
	for (const DiscoverySource source : kAllDiscoverySources)
		if (!section_.names(source))
			model_.releaseKept(source, now);
}

void PodNetwork::reconfigure(const NonMasqueradeDiscovery &section, Clock::time_point now)
{
	const NonMasqueradeDiscovery before = std::exchange(section_, section);
	// First, so that what the edit withdraws is held down by the new value.
	if (section_.holdDown != before.holdDown)
		model_.setHoldDown(section_.holdDown, now);
	const bool within = section_.within != before.within;
	if (within)
		model_.setWithin(section_.within, now);
	if (within || section_.routeProtocols != before.routeProtocols ||
	    section_.routeInterfaces != before.routeInterfaces) {
		// Another filter: a new route source, whose first reading replaces the routes.
		routes_.reset();
		routesStale_ = false;
		if (section_.followsRoutes()) {
			model_.expect(DiscoverySource::routes, DiscoveredRanges::kRoutesInput);
			followRoutes(now);
		} else {
			model_.forgetInputs(DiscoverySource::routes, now);
		}
	}
	const bool flannel = section_.flannelSubnetEnv != before.flannelSubnetEnv;
	if (flannel && before.flannelSubnetEnv)
		model_.forget(DiscoverySource::flannel, before.flannelSubnetEnv->path, now);
	if (flannel && section_.flannelSubnetEnv)
		model_.expect(DiscoverySource::flannel, section_.flannelSubnetEnv->path);
	const bool cni = section_.cniConfDir != before.cniConfDir;
	if (cni)
		model_.forgetInputs(DiscoverySource::cni, now);
	for (const DiscoverySource source : kAllDiscoverySources)
		if (!section_.names(source))
			model_.releaseKept(source, now);
	if (flannel || cni)
		allWatched_ = watchDirectories();
	if (flannel || cni || within)
		readFiles(now, "the section changed");
}

PodNetwork::Fds PodNetwork::fds() const
{
	return {routes_ ? routes_->fd() : -1, watch_.isValid() ? watch_.get() : -1};
}

void PodNetwork::followRoutes(Clock::time_point now)
{
	if (!routes_) {
		auto source = openRoutes_(routeFilter(section_, ipv6_));
		if (source) {
			routes_.emplace(std::move(*source));
			routesFresh_ = true;
		} else {
			routesError_ = source.error().message;
		}
	}
	readRoutes(true, now);
}

void PodNetwork::readRoutes(bool reread, Clock::time_point now)
{
	if (!routes_) {
		model_.markStale(DiscoverySource::routes, DiscoveredRanges::kRoutesInput,
				 "cannot follow the routes: " + routesError_);
		return;
	}
	RouteSourceUpdate read = reread ? routes_->reread() : routes_->drain();
	if (routesFresh_ && read.reread && !read.failure) {
		// The source's first reading is all the routes say: what the model held of them
		// (through another filter) and they no longer give is withdrawn.
		std::vector<Sighting> sightings;
		for (const SelectedRoute &route : routes_->routes().all())
			sightings.push_back(Sighting{route.destination, route.origin()});
		model_.replace(DiscoverySource::routes, DiscoveredRanges::kRoutesInput, std::move(sightings), now);
		for (const SelectedRoute &route : read.update.outside)
			model_.noteOutside(DiscoverySource::routes, Sighting{route.destination, route.origin()});
		routesFresh_ = false;
	} else if (!routesFresh_) {
		model_.applyRoutes(read.update, now);
	}
	if (read.update.mustReread && !reread)
		return readRoutes(true, now); // once: reread() never asks for another
	if (read.failure) {
		routesStale_ = true;
		model_.markStale(DiscoverySource::routes, DiscoveredRanges::kRoutesInput, read.failure->message);
	} else if (reread) {
		routesStale_ = false;
		model_.markCurrent(DiscoverySource::routes, DiscoveredRanges::kRoutesInput);
		model_.releaseKept(DiscoverySource::routes, now);
	}
}

void PodNetwork::onReadable(Clock::time_point now)
{
	if (routes_)
		readRoutes(false, now);
	if (!watch_.isValid())
		return;
	bool changed = false;
	if (drainWatch(changed)) {
		allWatched_ = watchDirectories();
		readFiles(now, "a watched directory (or one on the way to it) was made, moved or deleted: "
			       "watched again");
	} else if (changed) {
		readFiles(now, "a watched directory changed");
	}
}

bool PodNetwork::drainWatch(bool &changed)
{
	// Events name what changed in a watched directory: any of them is a reason to read the
	// (small, bounded) files again. Only a directory's going, or an entry made in a parent
	// on the way to a missing one, changes what is watched.
	alignas(inotify_event) char buffer[4096];
	bool rewatch = false;
	for (int i = 0; i < 64; i++) {
		const ssize_t n = read(watch_.get(), buffer, sizeof(buffer));
		if (n <= 0)
			break;
		size_t at = 0;
		while (at + sizeof(inotify_event) <= static_cast<size_t>(n)) {
			inotify_event event;
			std::memcpy(&event, buffer + at, sizeof(event));
			const size_t end = at + sizeof(inotify_event) + event.len;
			if (end > static_cast<size_t>(n))
				break;
			const char *name = buffer + at + sizeof(inotify_event);
			const std::string_view entry(name, strnlen(name, event.len));
			const int wd = event.wd;
			const auto watch = std::find_if(watches_.begin(), watches_.end(),
							[wd](const Watch &w) { return w.wd == wd; });
			if (event.mask & (IN_IGNORED | IN_DELETE_SELF | IN_MOVE_SELF))
				rewatch = true;
			else if (watch != watches_.end() && watch->parent)
				rewatch = rewatch || entry == watch->next; // other entries of a parent: no news
			else
				changed = true; // a source's directory, or lost events (IN_Q_OVERFLOW)
			at = end;
		}
	}
	return rewatch;
}

void PodNetwork::onTimer(Clock::time_point now)
{
	if (routes_ ? routesStale_ : section_.followsRoutes())
		followRoutes(now);
	if (now - lastRead_ >= kRetryPeriod) {
		if (!allWatched_)
			allWatched_ = watchDirectories();
		readFiles(now, "the safety net, every 10 s");
	}
}

PodNetwork::Clock::time_point PodNetwork::nextWake() const
{
	Clock::time_point next = lastRead_ + kRetryPeriod;
	if (const auto leaves = model_.nextWake(); leaves && *leaves < next)
		next = *leaves;
	return next;
}

bool PodNetwork::watchDirectories()
{
	watches_.clear();
	watch_ = UniqueFd(inotify_init1(IN_NONBLOCK | IN_CLOEXEC));
	if (!watch_.isValid())
		return false; // the timer reads the files all the same
	std::vector<std::string> directories;
	if (section_.flannelSubnetEnv)
		directories.push_back(directoryOf(section_.flannelSubnetEnv->path));
	if (section_.cniConfDir)
		directories.push_back(section_.cniConfDir->path);
	bool all = true;
	for (const std::string &directory : directories) {
		const int wd = inotify_add_watch(watch_.get(), directory.c_str(), kDirectoryEvents);
		if (wd >= 0) {
			watches_.push_back(Watch{wd, false, {}});
			continue;
		}
		all = false;
		// Missing: its nearest parent that exists, for the entry that leads on to it (a
		// walk bounded by the path's length).
		std::string child = directory;
		while (child.size() > 1) {
			const std::string parent = directoryOf(child);
			const int parentWd = inotify_add_watch(watch_.get(), parent.c_str(), kParentEvents);
			if (parentWd >= 0) {
				watches_.push_back(Watch{parentWd, true, child.substr(parent.size() == 1 ? 1 : parent.size() + 1)});
				break;
			}
			child = parent;
		}
	}
	return all;
}

void PodNetwork::readFiles(Clock::time_point now, const char *why)
{
	lastRead_ = now;
	if (!section_.flannelSubnetEnv && !section_.cniConfDir)
		return;
	log::debug("pod network: reading the files ({}{}{}): {}",
		   section_.flannelSubnetEnv ? section_.flannelSubnetEnv->path : "",
		   section_.flannelSubnetEnv && section_.cniConfDir ? ", " : "",
		   section_.cniConfDir ? section_.cniConfDir->path : "", why);
	if (section_.flannelSubnetEnv)
		readFlannel(section_.flannelSubnetEnv->path, now);
	if (section_.cniConfDir)
		readCni(section_.cniConfDir->path, now);
}

void PodNetwork::readFlannel(const std::string &path, Clock::time_point now)
{
	auto read = readFlannelSubnetEnv(path);
	if (!read)
		return model_.markStale(DiscoverySource::flannel, path, read.error().message);
	if (!*read) {
		// While the agent's table holds ranges of it from before the start, a file not
		// there (yet) is a reading that failed: they stay until the file says otherwise.
		if (model_.kept(DiscoverySource::flannel) > 0)
			return model_.markStale(DiscoverySource::flannel, path, kNotThereYet);
		return model_.markAbsent(DiscoverySource::flannel, path, now);
	}
	std::vector<Sighting> sightings;
	for (const FlannelNetwork &network : (*read)->networks)
		sightings.push_back({network.prefix, fmt::format("{} in {}:{}", network.key, path, network.line)});
	model_.replace(DiscoverySource::flannel, path, std::move(sightings), now);
	model_.releaseKept(DiscoverySource::flannel, now);
}

void PodNetwork::readCni(const std::string &dir, Clock::time_point now)
{
	auto read = readCniConfDir(dir);
	if (!read)
		return model_.markStale(DiscoverySource::cni, dir, read.error().message);
	if (!*read && model_.kept(DiscoverySource::cni) > 0)
		return model_.markStale(DiscoverySource::cni, dir, kNotThereYet); // as readFlannel
	std::set<std::string> present;
	bool allRead = true;
	for (const CniConfFile &file : read->value_or(std::vector<CniConfFile>{})) {
		present.insert(file.path);
		if (!file.conf) {
			model_.markStale(DiscoverySource::cni, file.path, file.conf.error().message);
			allRead = false;
			continue;
		}
		std::vector<Sighting> sightings;
		for (const CniSubnet &subnet : file.conf->subnets)
			sightings.push_back({subnet.prefix, fmt::format("{} ranges subnet in {}:{}", subnet.plugin,
									file.path, subnet.line)});
		model_.replace(DiscoverySource::cni, file.path, std::move(sightings), now);
	}
	// The directory listed: it is no input of its own any more (one that was stale says it
	// reads again). A file that went says nothing any more, and its name is forgotten.
	std::vector<std::string> gone;
	for (const DiscoveryInput &input : model_.inputs())
		if (input.source == DiscoverySource::cni && !present.count(input.name))
			gone.push_back(input.name);
	for (const std::string &name : gone) {
		if (name == dir)
			model_.markCurrent(DiscoverySource::cni, dir);
		model_.forget(DiscoverySource::cni, name, now);
	}
	if (allRead)
		model_.releaseKept(DiscoverySource::cni, now);
}

LoadedConfig withPodNetworkReadOnce(LoadedConfig loaded, bool ipv6, const std::function<RangesBySource()> &readKept)
{
	const auto &section = loaded.config.nonMasqueradeDiscovery;
	if (!section)
		return loaded;
	// One reading and nothing after it: a hold-down would never end.
	NonMasqueradeDiscovery once = *section;
	once.holdDown = Duration(0);
	const std::optional<RangesBySource> kept = readKept ? std::optional(readKept()) : std::nullopt;
	const auto now = PodNetwork::Clock::now();
	PodNetwork podNetwork(once, ipv6, now, kept ? &*kept : nullptr);
	(void)podNetwork.takeChanges(now); // what it found is in force
	for (const DiscoveryMessage &message : podNetwork.takeMessages())
		message.warning ? log::warning("{}", message.text) : log::info("{}", message.text);
	putDiscovered(loaded.config, podNetwork.model());
	return loaded;
}

void putDiscovered(Config &config, const DiscoveredRanges &model)
{
	std::map<std::string, std::string> originsOf; // by prefix
	for (const DiscoveredRange &range : model.ranges()) {
		std::string &origins = originsOf[range.prefix.toString()];
		for (const DiscoveredRange::Origin &origin : range.origins)
			origins += (origins.empty() ? "" : "; ") + origin.text;
		if (origins.empty())
			origins = "withdrawn, in force until its hold-down ends";
	}
	// The ranges put before go first: the operator's own entries stay where they are.
	std::erase_if(config.nonMasqueradeCIDRs, [](const Prefix &prefix) { return prefix.origin.discovered(); });
	config.discoveredOrigins.clear();
	for (Prefix &prefix : model.inForce()) {
		prefix.origin = Origin{Origin::kDiscovered, static_cast<uint32_t>(config.discoveredOrigins.size())};
		config.discoveredOrigins.push_back(originsOf[prefix.toString()]);
		config.nonMasqueradeCIDRs.push_back(std::move(prefix));
	}
	for (const DiscoverySource source : kAllDiscoverySources)
		config.discoveredBySource.of(source) = model.inForceOf(source);
}

} // namespace ipmasq
