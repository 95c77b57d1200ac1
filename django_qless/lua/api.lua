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
 put=throttle,job,put put.many=throttle,job,put requeue=throttle,job,put complete=throttle,stats,job fail=throttle,job
retry=throttle,job release=throttle,job heartbeat=job timeout=throttle,job cancel=throttle,job depends=job,jobmeta
priority=jobmeta log=jobmeta tag=jobmeta track=objects,jobmeta get=objects,jobmeta
multiget=objects,jobmeta pop=throttle,stats,objects,spawn,timers,pop
peek=objects,spawn,timers,pop reap=throttle,stats,objects,spawn,timers,pop jobs=timers,queries length=queries
queues=timers,queries pause=queries unpause=queries queue.forget=queries unfail=queries
failed=queries stats=queries workers=worker worker.deregister=worker
reserve=throttle,stats,objects,spawn,timers,pop,worker
reserve.wait=throttle,stats,objects,spawn,timers,pop,handoff,worker
complete.reserve=throttle,stats,objects,job,spawn,timers,pop,worker config.get=config
config.set=config config.unset=config throttle.set=throttle,throttle_cmds
throttle.get=throttle,throttle_cmds throttle.delete=throttle,throttle_cmds
throttle.locks=throttle,throttle_cmds throttle.pending=throttle,throttle_cmds
throttle.release=throttle,throttle_cmds queue.throttle.set=throttle,throttle_cmds
queue.throttle.get=throttle,throttle_cmds recur=recur recur.get=recur recur.update=recur
recur.tag=recur recur.untag=recur unrecur=recur
]]

local function main(keys, argv)
  if #keys > 0 then error('No Keys should be provided') end
  local command = argv[1]
  if command == nil then error('Must provide a command') end
  local mods = nil
  -- Command names are letters and dots: a plain find of ' <name>=' (a pattern search over the
  -- whole table cost ~7 µs a call) cannot match inside another entry.
  if not command:find('[^%a%.]') then
    local at = ROUTES:find(' ' .. command .. '=', 1, true) or ROUTES:find('\n' .. command .. '=', 1, true)
    if at then mods = ROUTES:match('^[^=]+=(%S+)', at + 1) end
  end
  if not mods then error('Unknown command ' .. command) end
  local raw_now = argv[2]
  local now = Q.is_decimal(raw_now) and tonumber(raw_now) or nil
  if now == nil or now ~= now or now == math.huge or now < 0 then
    error('Arg "now" missing or not a number: ' .. tostring(raw_now))
  end
  Q.need(mods)
  local entry = Q.commands[command]
  local args = {}
  for i = 3, #argv do args[i - 2] = argv[i] end
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
