-- api.lua: the entry point. Checks the invocation, loads the modules the command needs,
-- dispatches ARGV[1] to the command table, then flushes batched statistics and wake-ups.
--
-- Invocation: EVALSHA <sha> 0 <command> <now> <args...> (numkeys must be 0), or on Redis 7+
-- FCALL <function> 0 <command> <now> <args...> of the library built by core/lua.py, which runs
-- everything above main() once per server instead of once per call.
-- Keys: whatever the command touches; ql:s:wait|run:* (Q.flush_stats), ql:wake:<queue> and
-- the hand-off keys (Q.flush_wake, handoff.lua).

-- command=modules (loaded in this order) for every command of the protocol and the extensions,
-- as one long-string constant (built at compile time, not concatenated on every call). Every
-- entry is preceded by a space or a newline; main() finds ' <command>=' with a plain find.
local ROUTES = [[
 put=throttle,job,put put.many=throttle,job,put requeue=throttle,job,put complete=throttle,stats,job,complete fail=throttle,job
retry=throttle,job release=throttle,job heartbeat=job timeout=throttle,job cancel=throttle,job depends=job,jobmeta
priority=jobmeta log=jobmeta tag=jobmeta track=objects,jobmeta get=objects,jobmeta
multiget=objects,jobmeta pop=throttle,stats,objects,spawn,timers,pop
peek=objects,spawn,timers,pop reap=throttle,stats,objects,spawn,timers,pop jobs=timers,queries length=queries
queues=timers,queries pause=queries unpause=queries queue.forget=queries unfail=queries
failed=queries stats=queries workers=worker worker.deregister=worker
reserve=throttle,stats,objects,spawn,timers,pop,worker
reserve.wait=throttle,stats,objects,spawn,timers,pop,handoff,worker
complete.reserve=throttle,stats,objects,job,complete,spawn,timers,pop,worker config.get=config
config.set=config config.unset=config throttle.set=throttle,throttle_cmds
throttle.get=throttle,throttle_cmds throttle.delete=throttle,throttle_cmds
throttle.locks=throttle,throttle_cmds throttle.pending=throttle,throttle_cmds
throttle.release=throttle,throttle_cmds queue.throttle.set=throttle,throttle_cmds
queue.throttle.get=throttle,throttle_cmds recur=recur recur.get=recur recur.update=recur
recur.tag=recur recur.untag=recur unrecur=recur
 worker.hello=winfo worker.info=winfo
]]

-- Leases are judged by the Redis server's clock: a caller's `now` more than SKEW seconds away
-- from `TIME` is replaced by it, so a client whose clock is off can neither take a lease that
-- is still valid nor set expiries in the past. (Our client sends the server's time already;
-- stock clients send their own.) A caller within SKEW keeps its `now`, so pipelined calls keep
-- their staggered order. core/lua.py builds a variant with CALLER_TIME = true for tests, which
-- move time by the `now` they pass, as the qless protocol allows.
local CALLER_TIME = false
local SKEW = 1

-- command -> its modules, filled as commands are first seen (as a Redis 7 function this table
-- lives across calls, so a known command costs one lookup; only routes found are stored).
local route_of = {}

local function main(keys, argv)
  if #keys > 0 then error('No Keys should be provided') end
  local command = argv[1]
  if command == nil then error('Must provide a command') end
  local mods = route_of[command]
  -- Command names are letters and dots: a plain find of ' <name>=' (a pattern search over the
  -- whole table cost ~7 µs a call) cannot match inside another entry.
  if not mods and not command:find('[^%a%.]') then
    local at = ROUTES:find(' ' .. command .. '=', 1, true) or ROUTES:find('\n' .. command .. '=', 1, true)
    if at then
      mods = ROUTES:match('^[^=]+=(%S+)', at + 1)
      route_of[command] = mods
    end
  end
  if not mods then error('Unknown command ' .. command) end
  local raw_now = argv[2]
  local now
  -- The caller's text of `now` when it is plain decimal (Q.time_arg)
  if type(raw_now) == 'string' and raw_now:find('^%d+%.?%d*$') then
    now = raw_now + 0  -- (tonumber parses its argument twice)
    Q.now_text = raw_now
  else
    now = Q.is_decimal(raw_now) and tonumber(raw_now) or nil
    Q.now_text = nil
  end
  Q.now = now
  if now == nil or now ~= now or now == math.huge or now < 0 then
    error('Arg "now" missing or not a number: ' .. tostring(raw_now))
  end
  if not CALLER_TIME then
    -- Writes after TIME need effects replication: the default since Redis 5, asked for anyway
    -- (a 6.2 server may run with lua-replicate-commands off; later versions ignore this).
    if redis.replicate_commands then redis.replicate_commands() end
    local t = redis.call('TIME')
    local server = t[1] + t[2] / 1000000
    if now > server + SKEW or now < server - SKEW then
      now = server
      Q.now, Q.now_text = now, nil
    end
  end
  Q.need(mods)
  local entry = Q.commands[command]
  local args
  if #argv <= 200 then
    -- (one constructor: a copy loop grows the table several times)
    args = { unpack(argv, 3) }
  else
    -- (unpack is bounded by the Lua stack: put.many sends thousands of arguments)
    args = {}
    for i = 3, #argv do args[i - 2] = argv[i] end
  end
  Q.reset(entry[1])
  Q.worker_seen = nil
  Q.qth = nil
  Q.due = nil
  local result = entry[2](now, args)
  Q.flush_wake(now) -- first: a hand-off pops, and its statistics are flushed below
  if Q.flush_stats then Q.flush_stats() end
  return result
end

return main(KEYS, ARGV)
