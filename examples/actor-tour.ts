// The "Actor runtime" tour of docs/actors.md, runnable: `npx tsx examples/actor-tour.ts`.
import {
  AbstractBehavior,
  type ActorContext,
  ActorSystem,
  AskTimeoutError,
  DRAIN_AND_STOP,
  ReceiveTimeout,
  type Signal,
  SupervisorStrategies,
  Terminated,
} from "../src/index.ts";

class Deposit {
  constructor(readonly amount: number) {}
}
class GetBalance {}
class Balance {
  constructor(readonly amount: number) {}
}
type AccountCommand = Deposit | GetBalance;

class Account extends AbstractBehavior<AccountCommand> {
  private balance = 0;
  override preStart(context: ActorContext<AccountCommand>): void {
    context.setReceiveTimeout(1_000); // ReceiveTimeout after 1 s without messages
  }
  // An async receive: the next message starts only when this one has finished (per-actor FIFO).
  async receive(message: AccountCommand, context: ActorContext<AccountCommand>): Promise<void> {
    if (message instanceof Deposit) {
      if (message.amount <= 0) throw new RangeError("deposits must be positive"); // goes to supervision
      await Promise.resolve(); // pretend to write somewhere
      this.balance += message.amount;
    } else {
      context.sender?.tell(new Balance(this.balance));
    }
  }
  override receiveSignal(signal: Signal, context: ActorContext<AccountCommand>): void {
    if (signal instanceof ReceiveTimeout) context.stop(context.self); // idle: stop
  }
}

class Auditor extends AbstractBehavior<never> {
  constructor(private readonly onStopped: (path: string) => void) {
    super();
  }
  receive(): void {}
  override receiveSignal(signal: Signal): void {
    if (signal instanceof Terminated) this.onStopped(signal.ref.path.toString());
  }
}

const system = ActorSystem.create("bank");
const account = system.spawn(() => new Account(), "account-1", { supervision: SupervisorStrategies.resume() });
let stopped!: (path: string) => void;
const whenStopped = new Promise<string>((resolve) => {
  stopped = resolve;
});
system.spawn(
  new (class extends Auditor {
    override preStart(context: ActorContext<never>): void {
      context.watch(account);
    }
  })(stopped),
  "auditor",
);

account.tell(new Deposit(40));
account.tell(new Deposit(-1)); // fails; resume keeps the balance
account.tell(new Deposit(2));
const balance = await account.ask(new GetBalance(), Balance, 1_000);
console.log(`${account.path} balance: ${balance.amount}`);

try {
  await system.deadLetters.ask(new GetBalance(), Balance, 50);
} catch (error) {
  console.log(`no one answers: ${error instanceof AskTimeoutError ? error.name : error}`);
}

account.tell(new Deposit(8));
account.sendSystem(DRAIN_AND_STOP); // finishes the deposit of 8, then stops; later messages are dead letters
account.tell(new Deposit(1000));
console.log(`auditor saw ${await whenStopped} stop; dead letters: ${system.deadLetterCount}`);
await system.terminate();
