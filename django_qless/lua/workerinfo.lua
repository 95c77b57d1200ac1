-- workerinfo.lua: what a worker says about itself, for the dashboard (an extension).
--
--@ command worker.hello
--@ command worker.info
--@ command worker.beat throttle samples pop
--@ command worker.request
--
-- Commands (after `now`):
--   worker.hello    worker host pid queues-json [beat group]  -> nil (once when a worker starts)
--                   beat: the seconds within which the worker promises its next contact (60);
--                   group: the name its beats come under (its supervisor's; default its own)
--   worker.info     [worker...]  -> JSON [{name, last_seen, host, pid, queues, started, done,
--                   failed, beat, group, state, request}], most recent first
--   worker.beat     group state members reap [queue...]  -> JSON {"reaped": [jid...],
--                   "request": r[, "members_lost": true]}: `group` and its `members`
--                   (space-separated worker names, a supervisor's live children; ':' those
--                   sent before, unchanged) are alive. state: live or draining, as the worker
--                   reports it; start: live, and the requests left before go. reap 1: also
--                   re-offers expired leases as `reap` does. r: a request an operator left
--                   for the group since the last beat ('quiet', 'stop' or ''). members_lost:
--                   ':' was sent, but the group's hash had to be made anew.
--   worker.request  worker action  -> nil  (action: quiet or stop; stored for the worker's
--                   group and published on ql:w:<worker> as {"event": action, "worker": worker})
--
-- A worker's state (worker.info): `dead` when unseen for more than 3 beats, `stale` when
-- unseen for more than 1.5 beats, else `draining` when its group reports so, else `live`. It is
-- seen by its own calls (ql:workers) and by the beats of its group that name it (the group
-- itself, or one of its members: a child that died is no longer one), whichever came last.
--
-- Keys:
--   ql:w:<worker>:info  hash  host, pid, queues (JSON text), started, done, failed, beat, group
--                       (HSET, HGETALL, HMGET, DEL; `done` is counted by complete.reserve and
--                       `failed` by fail, one HINCRBY each: worker.lua, job.lua)
--   ql:workers          zset  worker -> last seen (ZADD by hello, ZREVRANGE, ZSCORE)
--   ql:wg:<group>       hash  seen, state, members, calm, request (HSET, HGET, HMGET, HDEL;
--                       DEL by worker.deregister of the group's name, and by the collection
--                       of its dead workers once its beats stopped: worker.lua)
--   channels: ql:w:<worker> (PUBLISH)

Q.mod.workerinfo = function()
  local rcall = Q.rcall
  local C = Q.commands
  local MAX_INFO = 1000 -- workers reported by one call (the listing is not paged by the engine)

  local BEAT = 60 -- the beat of a worker that never declared one (a stock qless worker)
  local STALE, DEAD = 1.5, 3 -- beats missed before a worker is stale, dead

  local function info_key(worker) return KP .. 'w:' .. worker .. ':info' end
  local function group_key(group) return KP .. 'wg:' .. group end

  -- The last beat of the worker's group that names it (a number, or nil), the group's
  -- reported state and pending request, for a worker's info row.
  local function group_of(row)
    local group = row.group
    if not group or group == '' then group = row.name end
    local g = rcall('HMGET', group_key(group), 'seen', 'state', 'request', 'members')
    local seen = tonumber(g[1])
    local named = (' ' .. (g[4] or '') .. ' '):find(' ' .. row.name .. ' ', 1, true)
    if group ~= row.name and not named then
      seen = nil -- (no longer one of its members: it died, or the group restarted)
    end
    return seen, g[2] or '', g[3] or ''
  end

  -- When the worker was last seen (its own calls or its group's beats) and its state.
  local function liveness(now, seen, row)
    local beat_seen, reported, request = group_of(row)
    if beat_seen and (not seen or beat_seen > seen) then seen = beat_seen end
    local beat = tonumber(row.beat) or BEAT
    local state = 'live'
    if not seen or now - seen > DEAD * beat then
      state = 'dead'
    elseif now - seen > STALE * beat then
      state = 'stale'
    elseif reported == 'draining' then
      state = 'draining'
    end
    return seen, state, request
  end

  C['worker.hello'] = { 'Hello', function(now, args)
    local worker = Q.worker(args[1])
    local host = args[2] or ''
    if #host > 255 or (host ~= '' and not host:match('^[\33-\126]+$')) then
      Q.fail('Arg "host" invalid: ' .. host)
    end
    local pid = Q.number('pid', args[3], 'not a number')
    if pid < 0 or pid ~= math.floor(pid) then Q.fail('Arg "pid" must be an integer >= 0') end
    if #(args[4] or '') > 8192 then Q.fail('Arg "queues" too large') end
    local queues = Q.json('queues', args[4])
    if type(queues) ~= 'table' or #queues > 100 then Q.fail('Arg "queues" must be a JSON list') end
    local beat = BEAT
    if args[5] then
      beat = Q.number('beat', args[5], 'not a number')
      if beat <= 0 or beat > 86400 then Q.fail('Arg "beat" must be > 0 and <= 86400') end
    end
    local group = worker
    if args[6] and args[6] ~= '' then group = Q.worker(args[6]) end
    -- A restarted worker with the same name starts its counters again.
    rcall('DEL', info_key(worker))
    rcall('HSET', info_key(worker), 'host', host, 'pid', Q.int_arg(pid), 'queues', args[4],
      'started', Q.int_arg(math.floor(now)), 'done', 0, 'failed', 0, 'beat', tostring(beat),
      'group', group)
    rcall('ZADD', K.workers, Q.time_arg(now), worker)
  end }

  C['worker.info'] = { 'WorkerInfo', function(now, args)
    local names = {}
    if #args > 0 then
      for i = 1, #args do table.insert(names, Q.worker(args[i])) end
      if #names > MAX_INFO then Q.fail('at most ' .. MAX_INFO .. ' workers') end
    else
      names = rcall('ZREVRANGE', K.workers, 0, MAX_INFO - 1)
    end
    local out = {}
    for _, w in ipairs(names) do
      local seen = rcall('ZSCORE', K.workers, w)
      local row = { name = w }
      local flat = rcall('HGETALL', info_key(w))
      for i = 1, #flat, 2 do row[flat[i]] = flat[i + 1] end
      local state, request
      seen, state, request = liveness(now, seen and tonumber(seen), row)
      row.last_seen = seen or cjson.null
      row.state = state
      row.request = request
      table.insert(out, row)
    end
    if #out == 0 then return '[]' end
    return cjson.encode(out)
  end }

  C['worker.beat'] = { 'Beat', function(now, args)
    local group = Q.worker(args[1])
    local state = args[2]
    if state ~= 'live' and state ~= 'draining' and state ~= 'start' then
      Q.fail('Arg "state" must be start, live or draining: ' .. tostring(state))
    end
    local members = args[3] or ''
    if members ~= ':' then  -- (':' the members sent before, unchanged: no name has a ':')
      if #members > 132000 then Q.fail('Arg "members" too large') end
      local count = 0
      for name in members:gmatch('%S+') do
        Q.worker(name)
        count = count + 1
      end
      if count > 1000 or members:find('[^%S ]') then
        Q.fail('Arg "members" must be at most 1000 worker names separated by spaces')
      end
    end
    if args[4] ~= '0' and args[4] ~= '1' then Q.fail('Arg "reap" must be 0 or 1') end
    local queues = {}
    for i = 5, #args do queues[#queues + 1] = Q.queue(args[i]) end
    if #queues > Q.MAX_LIST then Q.fail('at most ' .. Q.MAX_LIST .. ' queues') end
    local key = group_key(group)
    -- A starting worker forgets its name's old requests; a draining one its quiet request.
    if state == 'start' or (state == 'draining' and rcall('HGET', key, 'request') == 'quiet') then
      rcall('HDEL', key, 'request')
    end
    if state == 'start' then state = 'live' end
    -- One write a beat. `calm` is dropped by worker.request (and absent from a new hash):
    -- only then is the request read, and returned once.
    local request, lost = '', false
    local fields = { 'seen', Q.time_arg(now), 'state', state, 'calm', '1' }
    if members ~= ':' then
      fields[7], fields[8] = 'members', members
    end
    if rcall('HSET', key, unpack(fields)) > 0 then
      request = rcall('HGET', key, 'request') or ''
      -- (a new hash: the members sent before are gone; the worker sends them again)
      lost = members == ':' and rcall('HEXISTS', key, 'members') == 0
    end
    local reaped = '[]'
    if args[4] == '1' then reaped = C['reap'][2](now, queues) end
    return '{"reaped":' .. reaped .. ',"request":' .. cjson.encode(request) ..
      (lost and ',"members_lost":true}' or '}')
  end }

  C['worker.request'] = { 'Request', function(now, args)
    local worker = Q.worker(args[1])
    local action = args[2]
    if action ~= 'quiet' and action ~= 'stop' then
      Q.fail('Arg "action" must be quiet or stop: ' .. tostring(action))
    end
    local seen = rcall('ZSCORE', K.workers, worker)
    local row = { name = worker }
    local flat = rcall('HGETALL', info_key(worker))
    for i = 1, #flat, 2 do row[flat[i]] = flat[i + 1] end
    if not seen and #flat == 0 then Q.fail('no live worker ' .. worker .. ': it is not known') end
    local _, state = liveness(now, seen and tonumber(seen), row)
    if state == 'dead' then Q.fail('no live worker ' .. worker .. ': it is dead') end
    local group = row.group
    if not group or group == '' then group = worker end
    rcall('HSET', group_key(group), 'request', action)
    rcall('HDEL', group_key(group), 'calm') -- (the group's next beat reads the request)
    rcall(K.pub, KP .. 'w:' .. worker, cjson.encode({ event = action, worker = worker }))
  end }
end
